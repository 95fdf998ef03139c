//! The lookup tables of one build ([`Index`]: paths, modules, directories, crates, symbols by
//! name) and import resolution per language on top of them.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use smallvec::SmallVec;

use super::decl::{callable_target, split_method};
use super::paths::{crate_src, dir_of, file_name, join, normalize, rust_crate_src, rust_mod_dir};
use super::FileFacts;
use crate::chunk::{ChunkKind, CompactString, Language};

/// Most files an import of a whole directory (Go package, Java wildcard) links to.
const MAX_DIR_IMPORT_FILES: usize = 64;

/// A symbol: (file, chunk).
pub(super) type Sym = (usize, usize);

/// The symbols of one name: most names have one, held inline (a `Vec` allocated four on its
/// first push, for every name of the tree).
pub(super) type Syms = SmallVec<[Sym; 1]>;

/// Lookup tables built once per build.
pub(super) struct Index<'a> {
    /// Normalised path of each file.
    paths: Vec<&'a str>,
    by_path: HashMap<&'a str, usize>,
    /// Files by file name (for include/class lookups by suffix).
    by_name: HashMap<&'a str, Vec<usize>>,
    /// Python dotted module suffix → files.
    py_modules: HashMap<String, Vec<usize>>,
    /// Directory path suffix → directories (Go packages, Java packages).
    dir_suffix: HashMap<String, Vec<&'a str>>,
    /// Rust crate name → its `src` directory.
    crates: HashMap<String, Vec<String>>,
    /// (family, name) → symbols that are not methods (functions, types, module items).
    pub(super) free: HashMap<(Language, &'a str), Syms>,
    /// (family, owner type, name) → methods and associated functions.
    pub(super) members: HashMap<(Language, &'a str, &'a str), Syms>,
    /// (family, name) → methods of any type.
    pub(super) methods: HashMap<(Language, &'a str), Syms>,
    /// (family, name) → type definitions (class, struct, enum, trait, interface).
    pub(super) types: HashMap<(Language, &'a str), Syms>,
    /// (family, type) → the types it extends or implements, as its declarations state them
    /// (`class A(B)`, `extends B implements C`, `: public B`; Rust impls are in `impl_bases`).
    pub(super) bases: HashMap<(Language, &'a str), Vec<String>>,
    /// (Rust crate's `src` directory, type) → the traits an `impl Trait for Type` in that
    /// crate implements. Keyed by crate, not by name alone: names like `Error` or `Iter` are
    /// types of many crates, and a tree-wide list would hold every trait any of them
    /// implements.
    pub(super) impl_bases: HashMap<(&'a str, &'a str), Vec<String>>,
    /// The types `impl_bases` holds, in any crate (most method calls are on types with none).
    pub(super) impl_types: HashSet<&'a str>,
    /// (family, function or method name) → the return type every function of that name
    /// states (`""` when none states one), or `None` once two of them differ.
    pub(super) returns: HashMap<(Language, &'a str), Option<&'a str>>,
    /// Symbols of each file by name.
    pub(super) per_file: Vec<HashMap<&'a str, SmallVec<[usize; 1]>>>,
    /// Directory → files in it (same-package lookups).
    pub(super) dir_files: HashMap<&'a str, Vec<usize>>,
}

/// The language family whose code can call each other: TypeScript, TSX and JavaScript are one,
/// C and C++ are one, every other language is its own.
pub(super) fn family(l: Language) -> Language {
    match l {
        Language::Tsx | Language::JavaScript => Language::TypeScript,
        Language::Cpp => Language::C,
        other => other,
    }
}

/// Adds to a type's `list` of bases those of `found` it does not hold yet.
fn add_bases(list: &mut Vec<String>, found: &[String]) {
    for b in found {
        if !list.contains(b) {
            list.push(b.clone());
        }
    }
}

impl<'a> Index<'a> {
    pub(super) fn build(files: &[FileFacts<'a>]) -> Self {
        let mut idx = Index {
            paths: Vec::with_capacity(files.len()),
            by_path: HashMap::default(),
            by_name: HashMap::default(),
            py_modules: HashMap::default(),
            dir_suffix: HashMap::default(),
            dir_files: HashMap::default(),
            crates: HashMap::default(),
            free: HashMap::default(),
            members: HashMap::default(),
            methods: HashMap::default(),
            types: HashMap::default(),
            bases: HashMap::default(),
            impl_bases: HashMap::default(),
            impl_types: HashSet::default(),
            returns: HashMap::default(),
            per_file: Vec::with_capacity(files.len()),
        };
        let mut dirs: HashSet<&'a str> = HashSet::default();
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
            if let Some(name) = f.decls.package() {
                idx.crates
                    .entry(name.to_string())
                    .or_default()
                    .push(join(dir_of(path), "src"));
            }
            let fam = family(f.language);
            let mut local: HashMap<&'a str, SmallVec<[usize; 1]>> = HashMap::default();
            for (ci, c) in f.extract.chunks.iter().enumerate() {
                if c.kind == ChunkKind::Impl && f.language == Language::Rust {
                    let found = f.decls.bases(ci);
                    if !found.is_empty() {
                        let key = (crate_src(path), c.name.as_str());
                        idx.impl_types.insert(key.1);
                        add_bases(idx.impl_bases.entry(key).or_default(), found);
                    }
                    continue;
                }
                if !c.symbol.is_some() || !callable_target(c.kind) || c.name.is_empty() {
                    continue;
                }
                let name = c.name.as_str();
                local.entry(name).or_default().push(ci);
                match split_method(&c.qualified) {
                    Some((owner_path, _)) => {
                        let owner = owner_path.rsplit('/').next().unwrap_or(owner_path);
                        idx.members
                            .entry((fam, owner, name))
                            .or_default()
                            .push((fi, ci));
                        idx.methods.entry((fam, name)).or_default().push((fi, ci));
                    }
                    None => idx.free.entry((fam, name)).or_default().push((fi, ci)),
                }
                if c.kind.is_callable() {
                    let ret = f.decls.returns(ci).unwrap_or_default();
                    idx.returns
                        .entry((fam, name))
                        .and_modify(|agreed| {
                            if *agreed != Some(ret) {
                                *agreed = None;
                            }
                        })
                        .or_insert(Some(ret));
                }
                if c.kind.is_type() {
                    idx.types.entry((fam, name)).or_default().push((fi, ci));
                    let found = f.decls.bases(ci);
                    if !found.is_empty() {
                        add_bases(idx.bases.entry((fam, name)).or_default(), found);
                    }
                }
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
        for v in idx.crates.values_mut() {
            v.sort();
            v.dedup();
        }
        idx
    }

    /// The file of the Rust module a path qualifier names (`crate::a::b`, `super`,
    /// `self::m`, `other_crate::m`, `m`), seen from file `fi`; `None` when it is not a module
    /// file of this build (a type, an inline module, another crate).
    pub(super) fn rust_module(&self, fi: usize, q: &str) -> Option<usize> {
        let path = self.path_of(fi);
        let segs: Vec<&str> = q.split("::").filter(|s| !s.is_empty()).collect();
        let first = *segs.first()?;
        let root = |src: &str| {
            self.file(&join(src, "lib.rs"))
                .or_else(|| self.file(&join(src, "main.rs")))
        };
        // (module file, directory of its submodules, segments consumed)
        let (mut file, mut dir, used) = match first {
            "crate" => {
                let src = rust_crate_src(path);
                (root(&src)?, src, 1)
            }
            "self" => (fi, rust_mod_dir(path), 1),
            "super" => {
                let mut d = rust_mod_dir(path);
                let mut file = fi;
                let mut n = 0;
                let src = rust_crate_src(path);
                while n < segs.len() && segs[n] == "super" {
                    d = dir_of(&d).to_string();
                    file = if d == src || d.len() < src.len() {
                        root(&src)?
                    } else {
                        self.rust_probe(dir_of(&d), &[file_name(&d)])?
                    };
                    n += 1;
                }
                (file, d, n)
            }
            name => match self.crates.get(name) {
                Some(srcs) if srcs.len() == 1 => (root(&srcs[0])?, srcs[0].clone(), 1),
                _ => (fi, rust_mod_dir(path), 0),
            },
        };
        for seg in &segs[used..] {
            file = self.rust_probe(&dir, &[seg])?;
            dir = join(&dir, seg);
        }
        (used > 0 || segs.len() > used).then_some(file)
    }

    fn file(&self, path: &str) -> Option<usize> {
        self.by_path.get(path).copied()
    }

    pub(super) fn resolve_import(
        &self,
        fi: usize,
        f: &FileFacts,
        module: &str,
        names: &[CompactString],
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

    fn py_import(&self, path: &str, module: &str, names: &[CompactString]) -> Vec<usize> {
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

    pub(super) fn path_of(&self, fi: usize) -> &str {
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

    fn rust_import(&self, path: &str, module: &str, names: &[CompactString]) -> Vec<usize> {
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

    fn java_import(&self, module: &str, names: &[CompactString], fi: usize) -> Vec<usize> {
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
