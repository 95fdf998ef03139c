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

use std::collections::{HashMap, HashSet};

use crate::chunk::{ChunkKind, FileExtract, Language};

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

/// Most files an import of a whole directory (Go package, Java wildcard) links to.
const MAX_DIR_IMPORT_FILES: usize = 64;
/// Global candidate lists longer than this are not scanned (the name is too common).
const MAX_GLOBAL_CANDIDATES: usize = 512;

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

/// Qualifier categories of a call.
enum Qual<'a> {
    None,
    /// `self`, `this`, `Self`, `cls`, `super`.
    SelfLike,
    /// Anything else; holds its last path segment (`os.path` → `path`, `a::Foo` → `Foo`).
    Other(&'a str),
}

impl<'a> Qual<'a> {
    fn new(q: Option<&'a str>) -> Self {
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

struct CallCtx<'a, 'f> {
    files: &'f [FileFacts<'a>],
    caller_file: usize,
    caller_owner: &'f str,
    q: Qual<'f>,
}

/// Owner type/module of a qualified name: `a/Foo#bar` → `Foo`, `m/f` → `m`, `f` → ``.
fn owner_of(qualified: &str) -> &str {
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

type Sym = (usize, usize);

fn resolve_call(
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

fn dir_of(path: &str) -> &str {
    path.rsplit_once('/').map(|(d, _)| d).unwrap_or("")
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn stem_of(path: &str) -> &str {
    let n = file_name(path);
    n.split('.').next().unwrap_or(n)
}

fn dir_name(path: &str) -> &str {
    file_name(dir_of(path))
}

fn join(dir: &str, rest: &str) -> String {
    if dir.is_empty() {
        rest.to_string()
    } else if rest.is_empty() {
        dir.to_string()
    } else {
        format!("{dir}/{rest}")
    }
}

/// Resolves `.` and `..` segments; `None` when the path leaves the repository.
fn normalize(path: &str) -> Option<String> {
    let mut out: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                out.pop()?;
            }
            s => out.push(s),
        }
    }
    Some(out.join("/"))
}

/// Lookup tables built once per build.
struct Index<'a> {
    /// Normalised path of each file.
    paths: Vec<&'a str>,
    by_path: HashMap<&'a str, usize>,
    /// Files by file name (for include/class lookups by suffix).
    by_name: HashMap<&'a str, Vec<usize>>,
    /// Python dotted module suffix → files.
    py_modules: HashMap<String, Vec<usize>>,
    /// Directory path suffix → directories (Go packages, Java packages).
    dir_suffix: HashMap<String, Vec<&'a str>>,
    /// Directory → files in it.
    dir_files: HashMap<&'a str, Vec<usize>>,
    /// Rust crate name → its `src` directory.
    crates: HashMap<String, Vec<String>>,
    /// Symbol name → symbols.
    global: HashMap<&'a str, Vec<Sym>>,
    per_file: Vec<HashMap<&'a str, Vec<usize>>>,
    by_dir: HashMap<(&'a str, &'a str), Vec<Sym>>,
}

fn callable_target(kind: ChunkKind) -> bool {
    kind.is_symbol() && !matches!(kind, ChunkKind::Impl | ChunkKind::Module)
}

impl<'a> Index<'a> {
    fn build(files: &[FileFacts<'a>]) -> Self {
        let mut idx = Index {
            paths: Vec::with_capacity(files.len()),
            by_path: HashMap::new(),
            by_name: HashMap::new(),
            py_modules: HashMap::new(),
            dir_suffix: HashMap::new(),
            dir_files: HashMap::new(),
            crates: HashMap::new(),
            global: HashMap::new(),
            per_file: Vec::with_capacity(files.len()),
            by_dir: HashMap::new(),
        };
        let mut dirs: HashSet<&'a str> = HashSet::new();
        for (fi, f) in files.iter().enumerate() {
            let path = f.path.trim_start_matches("./");
            idx.paths.push(path);
            idx.by_path.insert(path, fi);
            idx.by_name.entry(file_name(path)).or_default().push(fi);
            let dir = dir_of(path);
            idx.dir_files.entry(dir).or_default().push(fi);
            if matches!(f.language, Language::Go | Language::Java) {
                dirs.insert(dir);
            }
            if f.language == Language::Python {
                let no_ext = path
                    .strip_suffix(".py")
                    .or_else(|| path.strip_suffix(".pyi"))
                    .unwrap_or(path);
                let no_init = no_ext.strip_suffix("/__init__").unwrap_or(no_ext);
                let segs: Vec<&str> = no_init.split('/').filter(|s| !s.is_empty()).collect();
                for k in 0..segs.len() {
                    idx.py_modules
                        .entry(segs[k..].join("."))
                        .or_default()
                        .push(fi);
                }
            }
            if f.language == Language::Rust && (path.ends_with("src/lib.rs") || path == "lib.rs") {
                let src_dir = dir_of(path);
                let crate_dir = dir_of(src_dir);
                let name = if crate_dir.is_empty() {
                    String::new()
                } else {
                    file_name(crate_dir).replace('-', "_")
                };
                if !name.is_empty() {
                    idx.crates
                        .entry(name.clone())
                        .or_default()
                        .push(src_dir.to_string());
                    if let Some(short) = name.strip_prefix("cix_") {
                        idx.crates
                            .entry(short.to_string())
                            .or_default()
                            .push(src_dir.to_string());
                    }
                }
            }
            let mut local: HashMap<&'a str, Vec<usize>> = HashMap::new();
            for (ci, c) in f.extract.chunks.iter().enumerate() {
                if c.symbol_id.is_empty() || !callable_target(c.kind) || c.name.is_empty() {
                    continue;
                }
                local.entry(c.name.as_str()).or_default().push(ci);
                idx.global
                    .entry(c.name.as_str())
                    .or_default()
                    .push((fi, ci));
                idx.by_dir
                    .entry((dir, c.name.as_str()))
                    .or_default()
                    .push((fi, ci));
            }
            idx.per_file.push(local);
        }
        for d in dirs {
            let segs: Vec<&str> = d.split('/').filter(|s| !s.is_empty()).collect();
            for k in 0..segs.len() {
                idx.dir_suffix
                    .entry(segs[k..].join("/"))
                    .or_default()
                    .push(d);
            }
            if segs.is_empty() {
                idx.dir_suffix.entry(String::new()).or_default().push(d);
            }
        }
        idx
    }

    fn file(&self, path: &str) -> Option<usize> {
        self.by_path.get(path).copied()
    }

    fn resolve_import(
        &self,
        fi: usize,
        f: &FileFacts,
        module: &str,
        names: &[String],
    ) -> Vec<usize> {
        let path = f.path.trim_start_matches("./");
        match f.language {
            Language::TypeScript | Language::Tsx | Language::JavaScript => {
                self.js_import(path, module).into_iter().collect()
            }
            Language::Python => self.py_import(path, module, names),
            Language::Rust => self.rust_import(path, module, names),
            Language::C | Language::Cpp => self.c_include(path, module).into_iter().collect(),
            Language::Go => self.dir_import(module, "go", fi, true),
            Language::Java => self.java_import(module, names, fi),
            _ => Vec::new(),
        }
    }

    fn js_import(&self, path: &str, module: &str) -> Option<usize> {
        let module = module.split(['?', '#']).next().unwrap_or(module);
        let base = if module.starts_with("./")
            || module.starts_with("../")
            || module == "."
            || module == ".."
        {
            normalize(&join(dir_of(path), module))?
        } else if let Some(rest) = module
            .strip_prefix("@/")
            .or_else(|| module.strip_prefix("~/"))
        {
            normalize(&join("src", rest))?
        } else {
            normalize(module)?
        };
        const EXTS: [&str; 10] = [
            ".ts", ".tsx", ".d.ts", ".js", ".jsx", ".mjs", ".cjs", ".mts", ".cts", ".json",
        ];
        let mut probes = vec![base.clone()];
        for stem in [
            base.strip_suffix(".js"),
            base.strip_suffix(".jsx"),
            base.strip_suffix(".mjs"),
            base.strip_suffix(".cjs"),
        ]
        .into_iter()
        .flatten()
        {
            for e in [".ts", ".tsx", ".mts", ".cts"] {
                probes.push(format!("{stem}{e}"));
            }
        }
        for e in EXTS {
            probes.push(format!("{base}{e}"));
        }
        for e in EXTS {
            probes.push(format!("{base}/index{e}"));
        }
        probes.iter().find_map(|p| self.file(p))
    }

    fn py_probe(&self, module_path: &str) -> Option<usize> {
        self.file(&format!("{module_path}.py"))
            .or_else(|| self.file(&format!("{module_path}.pyi")))
            .or_else(|| self.file(&join(module_path, "__init__.py")))
    }

    fn py_import(&self, path: &str, module: &str, names: &[String]) -> Vec<usize> {
        let mut out = Vec::new();
        let dots = module.chars().take_while(|c| *c == '.').count();
        let rest = module[dots..].replace('.', "/");
        if dots > 0 {
            let mut dir = dir_of(path).to_string();
            for _ in 1..dots {
                if dir.is_empty() {
                    return out;
                }
                dir = dir_of(&dir).to_string();
            }
            let base = join(&dir, &rest);
            let mut sub_found = false;
            for n in names {
                if let Some(t) = self.py_probe(&join(&base, n)) {
                    out.push(t);
                    sub_found = true;
                }
            }
            if !rest.is_empty() || !sub_found {
                out.extend(self.py_probe(&base));
            }
            return out;
        }
        if rest.is_empty() {
            return out;
        }
        let found = self
            .py_probe(&rest)
            .or_else(|| self.py_probe(&join(dir_of(path), &rest)))
            .or_else(|| {
                let segs = module.split('.').count();
                let c = self.py_modules.get(module)?;
                if segs >= 2 && c.len() == 1 {
                    Some(c[0])
                } else {
                    None
                }
            });
        if let Some(t) = found {
            out.push(t);
            // `from pkg import submodule`.
            let p = self.path_of(t);
            if p.ends_with("__init__.py") {
                for n in names {
                    out.extend(self.py_probe(&join(dir_of(p), n)));
                }
            }
        }
        out
    }

    fn path_of(&self, fi: usize) -> &str {
        self.paths.get(fi).copied().unwrap_or("")
    }

    fn rust_probe(&self, dir: &str, segs: &[&str]) -> Option<usize> {
        if segs.is_empty() {
            return None;
        }
        let p = join(dir, &segs.join("/"));
        self.file(&format!("{p}.rs"))
            .or_else(|| self.file(&join(&p, "mod.rs")))
    }

    fn rust_import(&self, path: &str, module: &str, names: &[String]) -> Vec<usize> {
        let segs: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
        if segs.is_empty() {
            return Vec::new();
        }
        let mod_dir = rust_mod_dir(path);
        let mut bases: Vec<(String, usize)> = Vec::new(); // (dir, segments consumed)
        match segs[0] {
            "crate" => bases.push((rust_crate_src(path), 1)),
            "self" => bases.push((mod_dir.clone(), 1)),
            "super" => {
                let mut d = mod_dir.clone();
                let mut n = 0;
                while n < segs.len() && segs[n] == "super" {
                    d = dir_of(&d).to_string();
                    n += 1;
                }
                bases.push((d, n));
            }
            first => {
                // `mod foo;` / 2015-style paths relative to the current module, then crates.
                bases.push((mod_dir.clone(), 0));
                if let Some(srcs) = self.crates.get(first) {
                    if srcs.len() == 1 {
                        bases.push((srcs[0].clone(), 1));
                    }
                }
            }
        }
        for (dir, consumed) in bases {
            let rest = &segs[consumed..];
            let mut out = Vec::new();
            for n in names {
                let mut full: Vec<&str> = rest.to_vec();
                full.push(n.as_str());
                out.extend(self.rust_probe(&dir, &full));
            }
            if out.is_empty() {
                for k in (1..=rest.len()).rev() {
                    if let Some(t) = self.rust_probe(&dir, &rest[..k]) {
                        out.push(t);
                        break;
                    }
                }
            }
            if out.is_empty() && rest.is_empty() && consumed == 1 && segs[0] != "self" {
                // `use other_crate::Item` / `use crate::Item`: the crate root.
                out.extend(
                    self.file(&join(&dir, "lib.rs"))
                        .or_else(|| self.file(&join(&dir, "main.rs"))),
                );
            }
            if !out.is_empty() {
                return out;
            }
        }
        Vec::new()
    }

    fn c_include(&self, path: &str, module: &str) -> Option<usize> {
        if let Some(p) = normalize(&join(dir_of(path), module)) {
            if let Some(t) = self.file(&p) {
                return Some(t);
            }
        }
        if let Some(t) = normalize(module).and_then(|p| self.file(&p)) {
            return Some(t);
        }
        let base = file_name(module);
        let cands = self.by_name.get(base)?;
        let suffix = format!("/{}", module.trim_start_matches("./"));
        let matching: Vec<usize> = cands
            .iter()
            .copied()
            .filter(|&c| {
                let p = self.path_of(c);
                p.ends_with(&suffix) || p == module
            })
            .collect();
        if matching.len() == 1 {
            Some(matching[0])
        } else {
            None
        }
    }

    /// Go packages / Java wildcard imports: the files of the directory matching the import
    /// path's longest suffix.
    fn dir_import(&self, module: &str, ext: &str, fi: usize, go: bool) -> Vec<usize> {
        let segs: Vec<&str> = module.split(['/', '.']).filter(|s| !s.is_empty()).collect();
        let segs: Vec<&str> = if go {
            module.split('/').filter(|s| !s.is_empty()).collect()
        } else {
            segs
        };
        for k in 0..segs.len() {
            let suffix = segs[k..].join("/");
            let prefix_has_domain = segs[..k].iter().any(|s| s.contains('.'));
            let ok = k == 0 || segs.len() - k >= 2 || prefix_has_domain || !go;
            if !ok {
                continue;
            }
            let Some(dirs) = self.dir_suffix.get(&suffix) else {
                continue;
            };
            if dirs.len() != 1 {
                return Vec::new();
            }
            let mut out: Vec<usize> = self
                .dir_files
                .get(dirs[0])
                .map(|v| {
                    v.iter()
                        .copied()
                        .filter(|&t| {
                            let p = self.path_of(t);
                            t != fi && p.ends_with(&format!(".{ext}")) && !p.ends_with("_test.go")
                        })
                        .collect()
                })
                .unwrap_or_default();
            out.truncate(MAX_DIR_IMPORT_FILES);
            return out;
        }
        Vec::new()
    }

    fn java_import(&self, module: &str, names: &[String], fi: usize) -> Vec<usize> {
        let segs: Vec<&str> = module.split('.').filter(|s| !s.is_empty()).collect();
        // Class import (or static import of a class member): the class file by path suffix;
        // nested classes fall back to their outer class.
        for k in (1..=segs.len()).rev() {
            let class = segs[k - 1];
            let file = format!("{class}.java");
            if let Some(c) = self.by_name.get(file.as_str()) {
                let want = format!("{}.java", segs[..k].join("/"));
                let m: Vec<usize> = c
                    .iter()
                    .copied()
                    .filter(|&t| {
                        let p = self.path_of(t);
                        p == want || p.ends_with(&format!("/{want}"))
                    })
                    .collect();
                if m.len() == 1 {
                    return m;
                }
            }
            if !names.is_empty() && k + 1 < segs.len() {
                break;
            }
        }
        if names.is_empty() {
            return self.dir_import(module, "java", fi, false);
        }
        Vec::new()
    }
}

/// Directory holding the submodules of a Rust file's module.
fn rust_mod_dir(path: &str) -> String {
    let name = file_name(path);
    let dir = dir_of(path);
    if matches!(name, "mod.rs" | "lib.rs" | "main.rs") {
        dir.to_string()
    } else {
        join(dir, name.trim_end_matches(".rs"))
    }
}

/// The `src` directory of the crate a Rust file belongs to.
fn rust_crate_src(path: &str) -> String {
    let segs: Vec<&str> = path.split('/').collect();
    if let Some(i) = segs[..segs.len().saturating_sub(1)]
        .iter()
        .rposition(|s| *s == "src")
    {
        return segs[..=i].join("/");
    }
    dir_of(path).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::{extract, ChunkOptions};

    fn build(files: &[(&str, &str)]) -> (Vec<String>, Vec<FileExtract>, Vec<Language>) {
        let mut paths = Vec::new();
        let mut fxs = Vec::new();
        let mut langs = Vec::new();
        for (p, src) in files {
            let lang = Language::from_path(std::path::Path::new(p)).expect("lang");
            fxs.push(extract(lang, "r", p, src, &ChunkOptions::default()));
            paths.push(p.to_string());
            langs.push(lang);
        }
        (paths, fxs, langs)
    }

    fn edges(files: &[(&str, &str)]) -> (Vec<ResolvedEdge>, Vec<String>, Vec<FileExtract>) {
        let (paths, fxs, langs) = build(files);
        let facts: Vec<FileFacts> = paths
            .iter()
            .zip(&fxs)
            .zip(&langs)
            .map(|((p, e), l)| FileFacts {
                path: p,
                language: *l,
                extract: e,
            })
            .collect();
        let e = resolve(&facts);
        (e, paths, fxs)
    }

    fn chunk_of(fxs: &[FileExtract], file: usize, qualified: &str) -> NodeRef {
        let chunk = fxs[file]
            .chunks
            .iter()
            .position(|c| c.qualified == qualified && !c.symbol_id.is_empty())
            .unwrap_or_else(|| panic!("no {qualified} in file {file}"));
        NodeRef::Chunk { file, chunk }
    }

    fn call_edge(es: &[ResolvedEdge], src: NodeRef, dst: NodeRef) -> Option<bool> {
        es.iter()
            .find(|e| e.kind == EdgeKind::Calls && e.src == src && e.dst == dst)
            .map(|e| e.resolved)
    }

    fn imports(es: &[ResolvedEdge], from: usize) -> Vec<usize> {
        es.iter()
            .filter(|e| e.kind == EdgeKind::Imports && e.src == NodeRef::File(from))
            .map(|e| match e.dst {
                NodeRef::File(f) => f,
                _ => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn contains_edges() {
        let (es, _, fxs) = edges(&[(
            "src/a.rs",
            "struct A;\nimpl A {\n    fn f(&self) {}\n}\nfn g() {}\n",
        )]);
        let impl_ref = NodeRef::Chunk {
            file: 0,
            chunk: fxs[0]
                .chunks
                .iter()
                .position(|c| c.kind == ChunkKind::Impl)
                .unwrap(),
        };
        let contains: Vec<(NodeRef, NodeRef)> = es
            .iter()
            .filter(|e| e.kind == EdgeKind::Contains)
            .map(|e| (e.src, e.dst))
            .collect();
        assert!(contains.contains(&(NodeRef::File(0), chunk_of(&fxs, 0, "A"))));
        assert!(contains.contains(&(NodeRef::File(0), chunk_of(&fxs, 0, "g"))));
        assert!(contains.contains(&(NodeRef::File(0), impl_ref)));
        assert!(contains.contains(&(impl_ref, chunk_of(&fxs, 0, "A#f"))));
        assert_eq!(contains.len(), 4);
        assert!(es.iter().all(|e| e.resolved));
    }

    #[test]
    fn same_file_call_resolved_and_self_prefers_own_type() {
        let src = "class A:\n    def run(self):\n        self.go()\n        helper()\n    def go(self):\n        pass\n\nclass B:\n    def go(self):\n        pass\n\ndef helper():\n    return A()\n";
        let (es, _, fxs) = edges(&[("m.py", src)]);
        let run = chunk_of(&fxs, 0, "A#run");
        assert_eq!(call_edge(&es, run, chunk_of(&fxs, 0, "A#go")), Some(true));
        assert_eq!(call_edge(&es, run, chunk_of(&fxs, 0, "B#go")), None);
        assert_eq!(call_edge(&es, run, chunk_of(&fxs, 0, "helper")), Some(true));
        assert_eq!(
            call_edge(&es, chunk_of(&fxs, 0, "helper"), chunk_of(&fxs, 0, "A")),
            Some(true)
        );
    }

    #[test]
    fn cross_file_call_via_import_resolved() {
        let (es, _, fxs) = edges(&[
            (
                "pkg/main.py",
                "from .util import parse\n\ndef main():\n    parse('x')\n",
            ),
            ("pkg/util.py", "def parse(s):\n    return s\n"),
            ("other/util2.py", "def parse(s):\n    return 2\n"),
        ]);
        assert_eq!(imports(&es, 0), vec![1]);
        assert_eq!(
            call_edge(&es, chunk_of(&fxs, 0, "main"), chunk_of(&fxs, 1, "parse")),
            Some(true)
        );
        assert_eq!(
            call_edge(&es, chunk_of(&fxs, 0, "main"), chunk_of(&fxs, 2, "parse")),
            None
        );
    }

    #[test]
    fn global_unique_inferred_and_ambiguous_dropped() {
        let (es, _, fxs) = edges(&[
            (
                "a/x.go",
                "package a\nfunc Run() {\n\tUnique()\n\tTwice()\n\tNear()\n}\n",
            ),
            (
                "b/y.go",
                "package b\nfunc Unique() {}\nfunc Twice() {}\nfunc Near() {}\n",
            ),
            ("c/z.go", "package c\nfunc Twice() {}\nfunc Near() {}\n"),
            ("a/w.go", "package a\nfunc Near() {}\n"),
        ]);
        let run = chunk_of(&fxs, 0, "Run");
        assert_eq!(
            call_edge(&es, run, chunk_of(&fxs, 1, "Unique")),
            Some(false)
        );
        assert!(!es.iter().any(|e| e.kind == EdgeKind::Calls
            && e.src == run
            && e.dst == chunk_of(&fxs, 1, "Twice")));
        assert!(!es.iter().any(|e| e.kind == EdgeKind::Calls
            && e.src == run
            && e.dst == chunk_of(&fxs, 2, "Twice")));
        // Several candidates, one in the caller's directory.
        assert_eq!(call_edge(&es, run, chunk_of(&fxs, 3, "Near")), Some(false));
        let calls = es.iter().filter(|e| e.kind == EdgeKind::Calls).count();
        assert_eq!(calls, 2);
    }

    #[test]
    fn python_import_edges() {
        let (es, _, _) = edges(&[
            ("app/main.py", "import app.models\nfrom app.services import billing\nfrom . import views\nfrom .helpers.text import slug\nimport os\n"),
            ("app/models.py", "class M: pass\n"),
            ("app/services/__init__.py", "\n"),
            ("app/services/billing.py", "def pay(): pass\n"),
            ("app/views.py", "def v(): pass\n"),
            ("app/helpers/text.py", "def slug(): pass\n"),
            ("app/__init__.py", "\n"),
        ]);
        assert_eq!(imports(&es, 0), vec![1, 2, 3, 4, 5]);
    }

    #[test]
    fn js_import_edges() {
        let (es, _, fxs) = edges(&[
            ("web/src/app.ts", "import { helper } from './util';\nimport Comp from '../components/Comp';\nimport x from './esm.js';\nimport lodash from 'lodash';\nconst c = require('./cfg');\nexport function main() { helper(); }\n"),
            ("web/src/util.ts", "export function helper() {}\n"),
            ("web/components/Comp/index.tsx", "export default function Comp() { return null; }\n"),
            ("web/src/esm.ts", "export const x = 1;\n"),
            ("web/src/cfg.js", "module.exports = {};\n"),
        ]);
        assert_eq!(imports(&es, 0), vec![1, 2, 3, 4]);
        assert_eq!(
            call_edge(&es, chunk_of(&fxs, 0, "main"), chunk_of(&fxs, 1, "helper")),
            Some(true)
        );
    }

    #[test]
    fn rust_import_edges() {
        let (es, _, fxs) = edges(&[
            ("crates/core/src/lib.rs", "pub mod graph;\nmod chunk;\nuse crate::graph::resolve;\npub fn top() { resolve(); }\n"),
            ("crates/core/src/graph.rs", "use super::chunk::Chunk;\nuse self::inner::X;\nmod inner;\npub fn resolve() {}\n"),
            ("crates/core/src/chunk/mod.rs", "pub struct Chunk;\n"),
            ("crates/core/src/graph/inner.rs", "pub struct X;\n"),
            ("crates/app/src/main.rs", "use core::graph::resolve;\nfn main() { resolve(); }\n"),
        ]);
        assert_eq!(imports(&es, 0), vec![1, 2]);
        assert_eq!(imports(&es, 1), vec![2, 3]);
        assert_eq!(imports(&es, 4), vec![1]);
        assert_eq!(
            call_edge(&es, chunk_of(&fxs, 4, "main"), chunk_of(&fxs, 1, "resolve")),
            Some(true)
        );
    }

    #[test]
    fn c_go_java_import_edges() {
        let (es, _, _) = edges(&[
            ("src/main.c", "#include \"util.h\"\n#include \"net/sock.h\"\n#include <stdio.h>\nint main() { return 0; }\n"),
            ("src/util.h", "int util(void);\n"),
            ("include/net/sock.h", "int sock(void);\n"),
            ("cmd/app/main.go", "package main\nimport (\n\t\"example.com/proj/pkg/store\"\n\t\"fmt\"\n)\nfunc main() {}\n"),
            ("pkg/store/store.go", "package store\nfunc Get() {}\n"),
            ("pkg/store/store_test.go", "package store\n"),
            ("src/main/java/com/acme/App.java", "package com.acme;\nimport com.acme.util.Strings;\nimport com.acme.model.*;\nclass App {}\n"),
            ("src/main/java/com/acme/util/Strings.java", "package com.acme.util;\nclass Strings {}\n"),
            ("src/main/java/com/acme/model/User.java", "package com.acme.model;\nclass User {}\n"),
        ]);
        assert_eq!(imports(&es, 0), vec![1, 2]);
        assert_eq!(imports(&es, 3), vec![4]);
        assert_eq!(imports(&es, 6), vec![7, 8]);
    }

    #[test]
    fn qualified_calls_and_methods() {
        let (es, _, fxs) = edges(&[
            ("src/a.rs", "use crate::b::Parser;\nfn run() {\n    let p = Parser::new();\n    p.parse();\n    len();\n}\n"),
            ("src/b.rs", "pub struct Parser;\nimpl Parser {\n    pub fn new() -> Self { Parser }\n    pub fn parse(&self) {}\n}\npub struct Other;\nimpl Other {\n    pub fn new() -> Self { Other }\n}\n"),
            ("src/c.rs", "pub struct T;\nimpl T { pub fn len(&self) -> usize { 0 } }\n"),
        ]);
        let run = chunk_of(&fxs, 0, "run");
        assert_eq!(
            call_edge(&es, run, chunk_of(&fxs, 1, "Parser#new")),
            Some(true)
        );
        assert_eq!(
            call_edge(&es, run, chunk_of(&fxs, 1, "Parser#parse")),
            Some(true)
        );
        // An unqualified call never resolves to a method of another file.
        assert!(!es
            .iter()
            .any(|e| e.kind == EdgeKind::Calls && e.dst == chunk_of(&fxs, 2, "T#len")));
    }

    #[test]
    fn output_is_sorted_and_deterministic() {
        let files = [
            ("a.py", "from b import f\ndef g():\n    f()\n    g()\n"),
            ("b.py", "def f():\n    pass\n"),
        ];
        let (e1, _, _) = edges(&files);
        let (e2, _, _) = edges(&files);
        assert_eq!(e1, e2);
        let mut sorted = e1.clone();
        sorted.sort();
        assert_eq!(e1, sorted);
        assert!(e1
            .iter()
            .any(|e| e.kind == EdgeKind::Calls && e.src == e.dst));
    }
}
