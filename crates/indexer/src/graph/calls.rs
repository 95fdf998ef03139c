//! Call resolution: what a call's name can refer to in the caller's scope, per the rules of the
//! caller's language family, with a confidence (see the order in the parent module's doc).
//!
//! Never across language families, never by name alone for a method call on a receiver whose
//! type the code does not state.

use std::collections::HashMap;

use rustc_hash::FxHashSet;

use super::decl::split_method;
use super::index::{family, Index, Sym};
use super::paths::{crate_src, dir_of};
use super::FileFacts;
use crate::chunk::{Language, CALLBACK_PARAM, RETURNED_BY};

/// How a call edge was resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Confidence {
    /// A unique name within the language family (the scope did not prove it).
    Likely,
    /// Through the file's own definitions, its imports, its package, or a stated type.
    Exact,
}

/// Re-exports followed at most this deep (`pub use a::f` → `a.rs` → `pub use b::f` …).
const MAX_REEXPORT_HOPS: usize = 4;

/// Inheritance followed at most this many levels up.
const MAX_BASE_DEPTH: usize = 6;

/// Calls in a chain followed through their results (`a(…).b(…).c()`) at most.
const MAX_CHAIN_CALLS: usize = 16;

/// Global candidate lists longer than this are not scanned (the name is too common).
const MAX_GLOBAL_CANDIDATES: usize = 512;

/// What a file sees: its imports, resolved to files of this build.
#[derive(Default)]
pub(super) struct Scope<'a> {
    /// Local name → (file, name there) for names imported one by one (aliases resolved).
    pub(super) named: HashMap<&'a str, Vec<(usize, &'a str)>>,
    /// Local name → files of a module bound to it (`import a.b as m`, `use crate::graph;`,
    /// `mod x;`, `import * as m`, a Go package name).
    pub(super) modules: HashMap<&'a str, Vec<usize>>,
    /// Files whose items are all visible unqualified (`use x::*`, `from x import *`,
    /// `#include`, Java wildcard imports).
    pub(super) globs: Vec<usize>,
}

pub(super) struct CallCtx<'a, 'f> {
    pub(super) files: &'f [FileFacts<'a>],
    pub(super) scopes: &'f [Scope<'a>],
    pub(super) caller_file: usize,
    /// Qualified name of the calling chunk (`Foo#bar`, `tests/helper`).
    pub(super) caller: &'f str,
}

/// Owner type/module of a qualified name: `a/Foo#bar` → `Foo`, `m/f` → `m`, `f` → ``.
pub(super) fn owner_of(qualified: &str) -> &str {
    let path = match split_method(qualified) {
        Some((p, _)) => p,
        None => match qualified.rsplit_once('/') {
            Some((p, _)) => p,
            None => "",
        },
    };
    path.rsplit('/').next().unwrap_or("")
}

fn is_self_like(q: &str) -> bool {
    matches!(q, "self" | "this" | "Self" | "cls" | "this.constructor")
}

/// The last segment of a path qualifier (`a::b::Foo` → `Foo`, `pkg.Cls` → `Cls`).
fn last_segment(q: &str) -> &str {
    q.rsplit(['.', ':']).find(|s| !s.is_empty()).unwrap_or(q)
}

fn is_path_like(q: &str) -> bool {
    !q.is_empty()
        && q.split(['.', ':']).filter(|s| !s.is_empty()).all(|s| {
            s.chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '$')
        })
}

impl<'a> CallCtx<'a, '_> {
    fn chunk(&self, s: Sym) -> &'a crate::chunk::Chunk {
        &self.files[s.0].extract.chunks[s.1]
    }

    fn lang(&self) -> Language {
        family(self.files[self.caller_file].language)
    }

    fn scope(&self) -> &Scope<'a> {
        &self.scopes[self.caller_file]
    }

    /// The imported name a local name stands for (`Dec` of `import JSONDecoder as Dec`).
    fn unalias<'q>(&self, local: &'q str) -> &'q str
    where
        'a: 'q,
    {
        self.scope()
            .named
            .get(local)
            .and_then(|l| l.first().map(|&(_, orig)| orig))
            .unwrap_or(local)
    }

    /// Free (non-method) symbols named `name` defined in file `fi` itself.
    fn own_free(&self, idx: &Index, fi: usize, name: &str) -> Vec<Sym> {
        idx.per_file[fi].get(name).map_or_else(Vec::new, |l| {
            l.iter()
                .map(|&c| (fi, c))
                .filter(|&s| !self.chunk(s).qualified.contains('#'))
                .collect()
        })
    }

    /// The type the caller is a method of (`Foo` for `Foo#bar`), if it is one.
    fn caller_type(&self) -> Option<&str> {
        let owner = owner_of(self.caller);
        (!owner.is_empty() && self.caller.contains('#')).then_some(owner)
    }

    /// Free (non-method) symbols named `name` defined in file `fi`, following its re-exports.
    fn free_in(&self, idx: &Index, fi: usize, name: &str, hops: usize) -> Vec<Sym> {
        let own = self.own_free(idx, fi, name);
        if !own.is_empty() || hops >= MAX_REEXPORT_HOPS {
            return top_level_first(self.files, own);
        }
        let sc = &self.scopes[fi];
        let mut out = Vec::new();
        if let Some(list) = sc.named.get(name) {
            for &(t, orig) in list {
                if t != fi {
                    out.extend(self.free_in(idx, t, orig, hops + 1));
                }
            }
        }
        if out.is_empty() {
            for &t in &sc.globs {
                if t != fi {
                    out.extend(self.free_in(idx, t, name, hops + 1));
                }
            }
        }
        out
    }

    /// Files where a type named `ty` is visible to the caller: its own file, named imports
    /// and globs.
    fn type_visible(&self, idx: &Index, ty: &str) -> Vec<Sym> {
        let fi = self.caller_file;
        let mut out = self.free_in(idx, fi, ty, 0);
        out.retain(|&s| self.chunk(s).kind.is_type());
        out
    }

    /// Methods named `name` of a type named `ty`, with the confidence the type's visibility
    /// gives.
    fn member(&self, idx: &Index, ty: &str, name: &str, stated: bool) -> Option<(Sym, Confidence)> {
        if let Some(hit) = self.own_member(idx, ty, name, stated) {
            return Some(hit);
        }
        self.inherited(idx, ty, name)
    }

    /// The traits Rust `impl Trait for ty` blocks implement: those of the caller's crate and
    /// of the crates declaring a `ty` the caller sees. Empty outside Rust.
    fn impl_bases<'i>(&self, idx: &'i Index, ty: &'i str) -> Vec<&'i str> {
        if self.lang() != Language::Rust || !idx.impl_types.contains(ty) {
            return Vec::new();
        }
        let mut crates: Vec<&str> = vec![crate_src(idx.path_of(self.caller_file))];
        for s in self.type_visible(idx, ty) {
            let c = crate_src(idx.path_of(s.0));
            if !crates.contains(&c) {
                crates.push(c);
            }
        }
        let mut out: Vec<&'i str> = Vec::new();
        for c in crates {
            for b in idx.impl_bases.get(&(c, ty)).into_iter().flatten() {
                if !out.contains(&b.as_str()) {
                    out.push(b);
                }
            }
        }
        out
    }

    /// Visits the types `ty` extends or implements a level at a time, nearest first, as their
    /// declarations state them (each type once, at most `MAX_BASE_DEPTH` levels; with
    /// `impls`, `ty`'s own Rust trait impls join the first level), until `visit` decides on
    /// a level: `Some(answer)` ends the walk with `answer`, `None` goes on to the next.
    fn walk_bases<'s, R>(
        &self,
        idx: &'s Index,
        ty: &'s str,
        impls: bool,
        mut visit: impl FnMut(&[&'s str]) -> Option<Option<R>>,
    ) -> Option<R> {
        let lang = self.lang();
        let mut seen: FxHashSet<&'s str> = FxHashSet::from_iter([ty]);
        let mut level: Vec<&'s str> = vec![ty];
        for depth in 0..MAX_BASE_DEPTH {
            let mut next: Vec<&'s str> = Vec::new();
            if impls && depth == 0 {
                for b in self.impl_bases(idx, ty) {
                    if seen.insert(b) {
                        next.push(b);
                    }
                }
            }
            for t in &level {
                for b in idx.bases.get(&(lang, *t)).into_iter().flatten() {
                    if seen.insert(b.as_str()) {
                        next.push(b);
                    }
                }
            }
            if next.is_empty() {
                return None;
            }
            if let Some(answer) = visit(&next) {
                return answer;
            }
            level = next;
        }
        None
    }

    /// A method found on the types `ty` extends or implements (breadth first, nearest first),
    /// as their declarations state them (and, for `ty` itself, its Rust trait impls).
    fn inherited(&self, idx: &Index, ty: &str, name: &str) -> Option<(Sym, Confidence)> {
        self.walk_bases(idx, ty, true, |level| {
            let hits: Vec<(Sym, Confidence)> = level
                .iter()
                .filter_map(|b| self.own_member(idx, b, name, true))
                .collect();
            let &(first, _) = hits.first()?;
            let same = hits.iter().all(|h| h.0 == first);
            Some(same.then(|| {
                let c = hits.iter().map(|h| h.1).min().unwrap_or(Confidence::Likely);
                (first, c)
            }))
        })
    }

    /// Whether `ty` and everything it extends are types of this build (so a method none of
    /// them declares is not inherited from elsewhere).
    fn bases_known(&self, idx: &Index, ty: &str) -> bool {
        let lang = self.lang();
        let mut todo: Vec<&str> = vec![ty];
        todo.extend(self.impl_bases(idx, ty));
        let mut seen: FxHashSet<&str> = FxHashSet::default();
        // Past 17 types nothing more is checked (the bases are taken as known): stop there
        // rather than drain what is left (bases are keyed by name, so a name shared by many
        // types of a large tree queues the bases of all of them).
        while seen.len() <= 16 {
            let Some(t) = todo.pop() else { break };
            if !seen.insert(t) {
                continue;
            }
            if !idx.types.contains_key(&(lang, t)) {
                return false;
            }
            if let Some(bs) = idx.bases.get(&(lang, t)) {
                todo.extend(bs.iter().map(String::as_str));
            }
        }
        true
    }

    /// `super.name(…)` / `super().name(…)`: a method of the caller's type's bases.
    fn on_super(&self, idx: &Index, name: &str) -> Option<(Sym, Confidence)> {
        self.inherited(idx, self.caller_type()?, name)
    }

    /// A method `name` declared on the type `ty` itself.
    fn own_member(
        &self,
        idx: &Index,
        ty: &str,
        name: &str,
        stated: bool,
    ) -> Option<(Sym, Confidence)> {
        let cands = idx.members.get(&(self.lang(), ty, name))?;
        let visible = self.type_visible(idx, ty);
        let vis_files: Vec<usize> = visible.iter().map(|s| s.0).collect();
        // Methods of the visible type: in its file, or (Rust impls, Go methods) anywhere in
        // its crate/package when the type itself is unique in the family.
        let in_vis: Vec<Sym> = cands
            .iter()
            .copied()
            .filter(|s| vis_files.contains(&s.0))
            .collect();
        if !in_vis.is_empty() {
            return unique(self.files, &in_vis).map(|s| (s, Confidence::Exact));
        }
        let types = idx.types.get(&(self.lang(), ty)).map_or(0, |t| t.len());
        let pick = unique(self.files, cands)?;
        if !visible.is_empty() || (stated && types == 1) {
            // The type is known (visible, or the only one of that name) and owns this method
            // (an impl block or method in another file of the build).
            Some((pick, Confidence::Exact))
        } else if types <= 1 {
            Some((pick, Confidence::Likely))
        } else {
            None
        }
    }

    /// A bare call `name(…)`.
    fn bare(&self, idx: &Index, name: &str) -> Option<(Sym, Confidence)> {
        let fi = self.caller_file;
        let lang = self.files[fi].language;
        // 1. Defined in the same file (nested definitions of the caller's enclosing scopes
        //    first).
        let own = self.own_free(idx, fi, name);
        if !own.is_empty() {
            let scoped = innermost_visible(self.files, self.caller, &own);
            return unique(self.files, &scoped).map(|s| (s, Confidence::Exact));
        }
        // 1b. Implicit `this` (Java, C++, C#): methods of the caller's own type.
        if matches!(lang, Language::Java | Language::Cpp | Language::C) {
            let owner = owner_of(self.caller);
            if !owner.is_empty() {
                if let Some(hit) = self.member(idx, owner, name, true) {
                    return Some(hit);
                }
            }
        }
        // 2. Imported by name (aliases resolved, re-exports followed).
        let sc = self.scope();
        if let Some(list) = sc.named.get(name) {
            let mut found = Vec::new();
            for &(t, orig) in list {
                found.extend(self.free_in(idx, t, orig, 1));
            }
            if !found.is_empty() {
                return unique(self.files, &found).map(|s| (s, Confidence::Exact));
            }
        }
        // 3. Glob imports, includes, and the caller's own package (Go, Java).
        let mut pool: Vec<usize> = sc.globs.clone();
        if matches!(lang, Language::Go | Language::Java) {
            let dir = dir_of(self.files[fi].path.trim_start_matches("./"));
            if let Some(fs) = idx.dir_files.get(dir) {
                pool.extend(
                    fs.iter()
                        .copied()
                        .filter(|&t| t != fi && self.files[t].language == lang),
                );
            }
        }
        pool.sort_unstable();
        pool.dedup();
        let mut found = Vec::new();
        for t in pool {
            found.extend(self.free_in(idx, t, name, 1));
        }
        if !found.is_empty() {
            return unique(self.files, &found).map(|s| (s, Confidence::Exact));
        }
        // 4. A name unique among the family's free symbols (visible through something the
        //    extractor does not model: a prelude, a macro, a star re-export chain).
        let all = idx.free.get(&(self.lang(), name))?;
        if all.len() > MAX_GLOBAL_CANDIDATES {
            return None;
        }
        let others: Vec<Sym> = all.iter().copied().filter(|s| s.0 != fi).collect();
        let top = top_level_first(self.files, others);
        unique(self.files, &top).map(|s| (s, Confidence::Likely))
    }

    /// `self.name(…)` / `this.name(…)` / `Self::name(…)`.
    fn on_self(&self, idx: &Index, name: &str) -> Option<(Sym, Confidence)> {
        let owner = self.caller_type()?;
        if let Some(hit) = self.member(idx, owner, name, true) {
            return Some(hit);
        }
        // Inherited from a type outside the build (or one whose declaration the extractor
        // could not read): the one method of that name. Not when every base is known.
        if self.bases_known(idx, owner) {
            return None;
        }
        let all = idx.methods.get(&(self.lang(), name))?;
        unique(self.files, all).map(|s| (s, Confidence::Likely))
    }

    /// The method `name` of a callback parameter's type, as the signature of the function the
    /// callback is passed to states it (`spec` is `callee/arg/param`, `new Class/arg/param`).
    fn callback_param(&self, idx: &Index, spec: &str, name: &str) -> Option<(Sym, Confidence)> {
        let mut it = spec.rsplitn(3, '/');
        let param: usize = it.next()?.parse().ok()?;
        let arg: usize = it.next()?.parse().ok()?;
        let callee = it.next()?;
        let (target, conf, fname) = match callee.strip_prefix("new ") {
            Some(class) => {
                let (c, conf) = self.bare(idx, class)?;
                let ctor =
                    idx.members
                        .get(&(self.lang(), self.chunk(c).name.as_str(), "constructor"))?;
                (unique(self.files, ctor)?, conf, "constructor")
            }
            None => {
                let (f, conf) = self.bare(idx, callee)?;
                (f, conf, callee)
            }
        };
        // The declaration is read as the function's own name states it: a callee reached
        // through an alias of another name is not looked up in it.
        if self.chunk(target).name != fname {
            return None;
        }
        let ty = self.files[target.0]
            .decls
            .callback_param(target.1, arg, param)?;
        // The type as the callee's own file names it.
        let at = self.in_file(target.0);
        let (hit, c) = at.member(idx, at.unalias(ty), name, true)?;
        Some((hit, c.min(conf)))
    }

    /// The method `name` of the type that the function `head(…)` calls states it returns, when
    /// that call resolves (`head`: `f`, `Type::new`, `pkg.New`, `a.b().c`).
    fn through_result(&self, idx: &Index, head: &str, name: &str) -> Option<(Sym, Confidence)> {
        // Each level strips one call; a generated chain of thousands is not followed (the
        // resolution threads' stacks are small).
        if head.matches(')').count() > MAX_CHAIN_CALLS {
            return None;
        }
        let (q, func, dot) = match head.rfind(['.', ':']) {
            Some(i) => (
                head[..i].trim_end_matches([':', '.']),
                &head[i + 1..],
                head.as_bytes()[i] == b'.',
            ),
            None => ("", head, false),
        };
        let ident = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
        let plain = func.strip_prefix('#').unwrap_or(func);
        if plain.is_empty() || !plain.chars().all(ident) {
            return None;
        }
        let (target, conf) = if q.is_empty() {
            self.bare(idx, func)?
        } else if is_self_like(q) {
            self.on_self(idx, func)?
        } else if dot && self.lang() == Language::Rust {
            // `x.f(…)` in Rust is a method of a value whose type is not known here (`x` may
            // share its name with a module: `parser.parse(s)` is not `parser::parse`).
            return None;
        } else {
            self.qualified(idx, q, None, func)?
        };
        let ret = self.files[target.0]
            .decls
            .returns(target.1)
            .filter(|r| !r.is_empty())?;
        let at = self.in_file(target.0);
        let (hit, c) = at.member(idx, at.unalias(ret), name, true)?;
        Some((hit, c.min(conf)))
    }

    /// `self.field.name(…)` / `this.field.name(…)` where a base of the caller's type (not the
    /// type itself: its own fields are bound in its file) states the field's type; the
    /// nearest level that states it, when every declaration there agrees.
    fn inherited_field(&self, idx: &Index, q: &str, name: &str) -> Option<(Sym, Confidence)> {
        let field = q
            .strip_prefix("self.")
            .or_else(|| q.strip_prefix("this."))?;
        if field.is_empty() || field.contains(['.', '(', '[', ':']) {
            return None;
        }
        let lang = self.lang();
        self.walk_bases(idx, self.caller_type()?, false, |level| {
            let mut found: Vec<(usize, &str)> = Vec::new();
            for b in level {
                for &(fi, _) in idx.types.get(&(lang, *b)).into_iter().flatten() {
                    if let Some(t) = self.files[fi].extract.member_binding(b, field) {
                        if !found.contains(&(fi, t)) {
                            found.push((fi, t));
                        }
                    }
                }
            }
            let &(fi, t) = found.first()?;
            Some(if found.len() > 1 {
                None
            } else {
                self.in_file(fi).bound(idx, t, name)
            })
        })
    }

    /// The method `name` of a value whose type a binding states, in the form
    /// [`crate::chunk::FileExtract::module_bindings`] holds it: a type, or what a function
    /// of a name returns (likely: found by name). A callback parameter's states nothing here.
    fn bound(&self, idx: &Index, ty: &str, name: &str) -> Option<(Sym, Confidence)> {
        if ty.starts_with(CALLBACK_PARAM) {
            return None;
        }
        match ty.strip_prefix(RETURNED_BY) {
            Some(func) => self
                .returned(idx, func, name)
                .map(|h| (h, Confidence::Likely)),
            None => self.stated(idx, ty, name),
        }
    }

    /// The method `name` of the type a path names (`pricing.Discount`, `Parser`), when it is
    /// a type of this build (the type is stated).
    fn named_type_member(&self, idx: &Index, path: &str, name: &str) -> Option<(Sym, Confidence)> {
        if !is_path_like(path) {
            return None;
        }
        let ty = self.unalias(last_segment(path));
        if !idx.types.contains_key(&(self.lang(), ty)) {
            return None;
        }
        self.member(idx, ty, name, true)
    }

    /// The method `name` of a receiver whose type the code states (`ty`, or a union `A|B`).
    fn stated(&self, idx: &Index, ty: &str, name: &str) -> Option<(Sym, Confidence)> {
        if !ty.contains('|') {
            return self.member(idx, self.unalias(ty), name, true);
        }
        // A union: the one member type that has the method (likely: the value may be of
        // another member type).
        let hits: Vec<Sym> = ty
            .split('|')
            .filter_map(|t| self.member(idx, self.unalias(t), name, true))
            .map(|h| h.0)
            .collect();
        let first = *hits.first()?;
        hits.iter()
            .all(|&h| h == first)
            .then_some((first, Confidence::Likely))
    }

    /// The same lookups as seen from file `fi` (a type named in another file's declaration
    /// is that file's name for it).
    fn in_file(&self, fi: usize) -> CallCtx<'a, '_> {
        CallCtx {
            files: self.files,
            scopes: self.scopes,
            caller_file: fi,
            caller: "",
        }
    }

    /// The method `name` of the type every function called `func` says it returns.
    fn returned(&self, idx: &Index, func: &str, name: &str) -> Option<Sym> {
        let ret = (*idx.returns.get(&(self.lang(), func))?).filter(|r| !r.is_empty())?;
        self.member(idx, self.unalias(ret), name, true).map(|h| h.0)
    }

    /// `q.name(…)` / `q::name(…)` with a qualifier other than `self`.
    fn qualified(
        &self,
        idx: &Index,
        q: &str,
        receiver: Option<&str>,
        name: &str,
    ) -> Option<(Sym, Confidence)> {
        // A stated receiver type (`let p = Parser::new(); p.parse()`, `x: Foo`).
        if let Some(spec) = receiver.and_then(|t| t.strip_prefix(CALLBACK_PARAM)) {
            if let Some(hit) = self.callback_param(idx, spec, name) {
                return Some(hit);
            }
        } else if let Some(func) = receiver.and_then(|t| t.strip_prefix(RETURNED_BY)) {
            // A local holding what a function returned: the type its signature states, when
            // every function of that name states the same one (likely: found by name).
            if let Some(hit) = self.returned(idx, func, name) {
                return Some((hit, Confidence::Likely));
            }
        } else if let Some(ty) = receiver {
            return self.stated(idx, ty, name);
        }
        // A field a base type states (`self._transport = transport` typed in `class Base`,
        // `this.source: Observable` declared on the superclass): the nearest bases first.
        if receiver.is_none() {
            if let Some(hit) = self.inherited_field(idx, q, name) {
                return Some(hit);
            }
        }
        // A module-level instance imported by name (`import { onlineManager } from
        // './onlineManager'`, `from a import default_decoder`): the type its own file states,
        // read as that file sees its names.
        if receiver.is_none() && !q.is_empty() && !q.contains(['.', ':', '(', '[', '{']) {
            let stated = self.scope().named.get(q).and_then(|l| {
                l.iter()
                    .find_map(|&(t, orig)| Some((t, self.files[t].extract.module_binding(orig)?)))
            });
            if let Some(hit) = stated.and_then(|(t, ty)| self.in_file(t).bound(idx, ty, name)) {
                return Some(hit);
            }
        }
        // A Go method expression, `(*inv.Store).Len(s)`: the method of the type named.
        if let Some(inner) = q.strip_prefix('(').and_then(|r| r.strip_suffix(')')) {
            let ty = inner.trim().trim_start_matches('*').trim();
            if self.lang() == Language::Go {
                if let Some(hit) = self.named_type_member(idx, ty, name) {
                    return Some(hit);
                }
            }
        }
        if !is_path_like(q) {
            // A literal of a named type (Go `pricing.Discount{Percent: 50}.Apply()`, Rust
            // `Point { x, y }.norm()`): the type is stated.
            if let Some(head) = strip_trailing_group(q, '{', '}') {
                return self.named_type_member(idx, head.trim_end_matches("::"), name);
            }
            let call_head = strip_trailing_group(q, '(', ')');
            // A new instance (`new Parser(src).parse()`): the type is stated.
            if let Some(class) = call_head.and_then(|h| h.strip_prefix("new ")) {
                return self.named_type_member(idx, class.trim(), name);
            }
            // A chained call on a function's result (`client.getQueryCache().getAll()`,
            // `Build(s, rules).Render()`, `Parser::new(src).parse()`): the return type the
            // signature of the function called states. When that call resolves, its own
            // declaration says (as sure as the call and the method are); else every function
            // of that name must state the same type (likely: found by name).
            if let Some(hit) = call_head.and_then(|h| self.through_result(idx, h, name)) {
                return Some(hit);
            }
            let func = call_head.map(|h| {
                h.rsplit(['.', ':'])
                    .next()
                    .unwrap_or(h)
                    .trim_start_matches(['#', '$'])
            });
            let hit = func
                .filter(|f| !f.is_empty() && f.chars().all(|c| c.is_alphanumeric() || c == '_'))
                .and_then(|f| self.returned(idx, f, name));
            return hit.map(|h| (h, Confidence::Likely));
        }
        let fi = self.caller_file;
        let lang = self.files[fi].language;
        let sc = self.scope();
        // A module bound by an import (`json.loads`, `graph::resolve`, `m.f` of `import * as m`).
        if let Some(ts) = sc.modules.get(q) {
            // Items at the module file's top level (or re-exported by it): not those nested
            // in a function or an inline module (`mod tests`) inside it.
            let found: Vec<Sym> = ts
                .iter()
                .flat_map(|&t| {
                    let mut f = self.free_in(idx, t, name, 1);
                    f.retain(|&s| s.0 != t || self.chunk(s).qualified == name);
                    f
                })
                .collect();
            if !found.is_empty() {
                return unique(self.files, &found).map(|s| (s, Confidence::Exact));
            }
        }
        if lang == Language::Rust {
            // An inline module of this file (`tests::helper`, `inner::f`).
            let want = format!("{}/{name}", q.replace("::", "/"));
            let inline: Vec<Sym> = idx.per_file[fi]
                .get(name)
                .map(|l| {
                    l.iter()
                        .map(|&c| (fi, c))
                        .filter(|&s| {
                            let qn = &self.chunk(s).qualified;
                            *qn == want || qn.ends_with(&format!("/{want}"))
                        })
                        .collect()
                })
                .unwrap_or_default();
            if !inline.is_empty() {
                return unique(self.files, &inline).map(|s| (s, Confidence::Exact));
            }
            // A module path: `crate::a::f`, `super::f`, `strsim::levenshtein`, `a::f`; its
            // first segment may be a module imported by `use`.
            let first = q.split("::").next().unwrap_or(q);
            let module = idx.rust_module(fi, q).or_else(|| {
                let base = sc.modules.get(first)?.first().copied()?;
                let rest = q.strip_prefix(first)?.trim_start_matches("::");
                if rest.is_empty() {
                    Some(base)
                } else {
                    idx.rust_module(base, &format!("self::{rest}"))
                }
            });
            if let Some(m) = module {
                // The module's own items: those at its file's top level, not those of an
                // inline module (`mod tests`) inside it.
                let mut found = self.free_in(idx, m, name, 0);
                found.retain(|&s| s.0 != m || self.chunk(s).qualified == name);
                if !found.is_empty() {
                    return unique(self.files, &found).map(|s| (s, Confidence::Exact));
                }
            }
        }
        // A type: `Foo::new`, `Foo.create`, `pkg.Foo.f`, or an imported alias of one.
        let ty = self.unalias(last_segment(q));
        let known_type = idx.types.contains_key(&(self.lang(), ty));
        if known_type {
            return self.member(idx, ty, name, false);
        }
        None
    }
}

/// `q` without the bracketed group it ends with (`f(a, g(b))` → `f`, `T{x: 1}` → `T`);
/// `None` when `q` does not end with `close` or its brackets do not balance.
fn strip_trailing_group(q: &str, open: char, close: char) -> Option<&str> {
    let body = q.strip_suffix(close)?;
    let mut depth = 1usize;
    for (i, c) in body.char_indices().rev() {
        if c == close {
            depth += 1;
        } else if c == open {
            depth -= 1;
            if depth == 0 {
                return Some(body[..i].trim_end());
            }
        }
    }
    None
}

/// Resolves one call to a symbol of the same language family, with its confidence.
pub(super) fn resolve_call(
    idx: &Index,
    ctx: &CallCtx,
    callee: &str,
    qualifier: Option<&str>,
    receiver: Option<&str>,
) -> Option<(Sym, Confidence)> {
    let hit = match qualifier.map(str::trim).filter(|q| !q.is_empty()) {
        None => ctx.bare(idx, callee),
        // A Rust path (`Self::f`, `self::f`, `super::f`, `a::b::f`): the extractor keeps its
        // trailing `::`.
        Some("Self::") => ctx.on_self(idx, callee),
        Some(q) if q.ends_with("::") => {
            ctx.qualified(idx, q.trim_end_matches("::"), receiver, callee)
        }
        Some(q) if is_self_like(q) => ctx.on_self(idx, callee),
        Some("super" | "super()") => ctx.on_super(idx, callee),
        // Python's explicit `super(Class, self).f()`: a method of `Class`'s bases.
        Some(q) if q.starts_with("super(") && q.ends_with(')') => {
            let args = &q["super(".len()..q.len() - 1];
            let class = args.split(',').next().unwrap_or("").trim();
            if class.is_empty() || !is_path_like(class) {
                return None;
            }
            ctx.inherited(idx, ctx.unalias(last_segment(class)), callee)
        }
        Some(q) => ctx.qualified(idx, q, receiver, callee),
    }?;
    // The invariant the rules above keep; checked so that no edge ever joins two families.
    (family(ctx.files[hit.0 .0].language) == ctx.lang()).then_some(hit)
}

/// Candidates whose qualified name is the caller's own scope or an enclosing one
/// (`outer/helper` for a caller `outer/inner`), else all of them.
fn innermost_visible(files: &[FileFacts], caller: &str, cands: &[Sym]) -> Vec<Sym> {
    let mut best: Vec<(usize, Sym)> = Vec::new();
    for &s in cands {
        let q = &files[s.0].extract.chunks[s.1].qualified;
        let scope = q.rsplit_once('/').map_or("", |(p, _)| p);
        let visible = scope.is_empty()
            || caller == scope
            || caller.starts_with(&format!("{scope}/"))
            || caller.starts_with(&format!("{scope}#"));
        if visible {
            best.push((scope.len(), s));
        }
    }
    let Some(max) = best.iter().map(|b| b.0).max() else {
        return cands.to_vec();
    };
    best.into_iter()
        .filter(|b| b.0 == max)
        .map(|b| b.1)
        .collect()
}

/// Top-level definitions when there are any (a module's `f`, not `outer/f` nested in another
/// function).
fn top_level_first(files: &[FileFacts], cands: Vec<Sym>) -> Vec<Sym> {
    let top: Vec<Sym> = cands
        .iter()
        .copied()
        .filter(|s| {
            let c = &files[s.0].extract.chunks[s.1];
            c.parent.is_none()
                || !files[s.0].extract.chunks[c.parent.unwrap_or(0)]
                    .kind
                    .is_callable()
        })
        .collect();
    if top.is_empty() {
        cands
    } else {
        top
    }
}

/// The single candidate, treating overloads (same file and qualified name) as one.
fn unique(files: &[FileFacts], cands: &[Sym]) -> Option<Sym> {
    let first = *cands.first()?;
    let fq = &files[first.0].extract.chunks[first.1].qualified;
    let all_same = cands
        .iter()
        .all(|s| s.0 == first.0 && files[s.0].extract.chunks[s.1].qualified == *fq);
    if all_same {
        cands.iter().copied().min()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::strip_trailing_group;

    #[test]
    fn a_trailing_group_is_stripped_only_when_balanced() {
        for (q, open, close, want) in [
            ("f()", '(', ')', Some("f")),
            ("Build(s,pricing.New())", '(', ')', Some("Build")),
            ("a.b(x).c(g(h()), y)", '(', ')', Some("a.b(x).c")),
            ("new Parser (src)", '(', ')', Some("new Parser")),
            ("(*inv.Store)", '(', ')', Some("")),
            ("f(x", '(', ')', None),
            ("f)", '(', ')', None),
            ("a.b", '(', ')', None),
            (
                "pricing.Discount{Percent:50}",
                '{',
                '}',
                Some("pricing.Discount"),
            ),
            ("Point { x: f(1), y: T { z } }", '{', '}', Some("Point")),
            ("f(x)", '{', '}', None),
        ] {
            assert_eq!(strip_trailing_group(q, open, close), want, "{q}");
        }
    }
}
