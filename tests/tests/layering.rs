//! Structural checks of the workspace, read from the source tree alone (no model, no build
//! artifacts): `scripts/layering.sh` runs them with the report shown.
//!
//! - `no_file_import_cycles`: per crate under `crates/`, the file-level module graph of `src/`
//!   (an edge A → B when file A names an item whose path resolves into module file B) has no
//!   cycle.
//! - `no_upward_crate_dependencies`: each crate depends only on the workspace crates that
//!   [`ALLOWED`] lists for it, and the lower crates do not pull in the server stack.
//! - `long_files_state_a_reason`: a source file over [`LONG_FILE_LINES`] lines says why near its
//!   top (`//! Long file: ...`).
//!
//! Path resolution follows Rust's rules as far as syntax allows: `crate::`, `self::`,
//! `super::`, names in scope (child modules, `use` imports, items), re-exports (`pub use` and
//! globs) followed to the module that defines the item, and the package's own library name in
//! its binaries. A `use` is an edge; a re-export (`pub use`, `pub(crate) use`) is not by
//! itself (a facade such as lib.rs re-exporting `m::Item` does not depend on `m`), but its
//! names used in the same file are. `mod x;` is no edge. Test code (`#[cfg(test)]`, `#[test]`)
//! is skipped: it may use anything.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use proc_macro2::{Spacing, TokenStream, TokenTree};
use syn::ext::IdentExt;
use syn::punctuated::Punctuated;
use syn::visit::{self, Visit};
use syn::{Attribute, Item, Meta, Token, UseTree};

/// Workspace crates and the workspace crates each may depend on ([dependencies] and
/// [build-dependencies]). Layers, lowest first: 0 cix-format, cix-kernels; 1 cix-sync,
/// cix-code; 2 cix-indexer, cix-memory; 3 cix-engine; 4 cix-queryd. A crate never depends on its own or a
/// higher layer. A new crate under `crates/` must be added here.
const ALLOWED: &[(&str, &[&str])] = &[
    ("cix-format", &[]),
    ("cix-kernels", &[]),
    ("cix-sync", &["cix-format"]),
    ("cix-indexer", &["cix-format", "cix-kernels", "cix-sync"]),
    ("cix-code", &["cix-format"]),
    ("cix-memory", &["cix-format", "cix-code"]),
    (
        "cix-engine",
        &[
            "cix-format",
            "cix-kernels",
            "cix-indexer",
            "cix-code",
            "cix-memory",
        ],
    ),
    (
        "cix-queryd",
        &[
            "cix-format",
            "cix-kernels",
            "cix-sync",
            "cix-indexer",
            "cix-code",
            "cix-memory",
            "cix-engine",
        ],
    ),
];

/// The layer of each crate in [`ALLOWED`] (checked against it by a unit test).
const LAYERS: &[(&str, u32)] = &[
    ("cix-format", 0),
    ("cix-kernels", 0),
    ("cix-sync", 1),
    ("cix-indexer", 2),
    ("cix-code", 1),
    ("cix-memory", 2),
    ("cix-engine", 3),
    ("cix-queryd", 4),
];

/// Workspace packages that hold no code, only feature pins (`workspace-hack/`: see its
/// manifest); any crate may depend on them. [`feature_pin_crates_hold_no_code`] keeps them so.
const FEATURE_PINS: &[(&str, &str)] = &[("cix-workspace-hack", "workspace-hack")];

/// Crates below the server that must not depend (directly) on the server stack.
const NO_SERVER_STACK: &[&str] = &["cix-code", "cix-memory", "cix-engine"];

/// The server stack: MCP, async runtime, HTTP, metrics.
const SERVER_STACK: &[&str] = &[
    "rmcp",
    "tokio",
    "hyper",
    "hyper-util",
    "http",
    "prometheus-client",
];

/// A source file longer than this many lines must state why.
const LONG_FILE_LINES: usize = 1000;

/// ... within this many lines from its top ...
const LONG_FILE_HEADER_LINES: usize = 40;

/// ... with a line starting with this.
const LONG_FILE_MARK: &str = "//! Long file:";

// ---------------------------------------------------------------------------------------------
// The workspace on disk.

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Every `crates/*/` directory, sorted.
fn all_crate_dirs() -> Vec<PathBuf> {
    let crates = workspace_root().join("crates");
    let mut dirs: Vec<PathBuf> = fs::read_dir(&crates)
        .unwrap_or_else(|e| panic!("reading {}: {e}", crates.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    assert!(!dirs.is_empty(), "no crates under {}", crates.display());
    dirs
}

/// `crates/*/` directories that hold a `Cargo.toml`, sorted.
fn crate_dirs() -> Vec<PathBuf> {
    all_crate_dirs()
        .into_iter()
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect()
}

fn read_toml(path: &Path) -> toml::Table {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.parse::<toml::Table>()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn package_name(manifest: &toml::Table) -> String {
    manifest
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(|n| n.as_str())
        .expect("[package] name")
        .to_string()
}

/// The module-tree roots of a crate (paths relative to its directory) and its library name.
fn crate_roots(dir: &Path, manifest: &toml::Table) -> (Vec<Root>, Option<String>) {
    fn push(roots: &mut Vec<Root>, dir: &Path, path: &str, is_lib: bool) {
        let path = path.trim_start_matches("./").to_string();
        if dir.join(&path).is_file() && !roots.iter().any(|r| r.path == path) {
            roots.push(Root { path, is_lib });
        }
    }
    let mut roots: Vec<Root> = Vec::new();
    let lib = manifest.get("lib");
    let lib_path = lib
        .and_then(|l| l.get("path"))
        .and_then(|p| p.as_str())
        .unwrap_or("src/lib.rs");
    push(&mut roots, dir, lib_path, true);
    let lib_name = roots.first().map(|_| {
        lib.and_then(|l| l.get("name"))
            .and_then(|n| n.as_str())
            .map(str::to_string)
            .unwrap_or_else(|| package_name(manifest).replace('-', "_"))
    });
    let bins = manifest.get("bin").and_then(|b| b.as_array());
    for bin in bins.into_iter().flatten() {
        if let Some(p) = bin.get("path").and_then(|p| p.as_str()) {
            push(&mut roots, dir, p, false);
        }
    }
    push(&mut roots, dir, "src/main.rs", false);
    let mut found: Vec<String> = Vec::new();
    for e in fs::read_dir(dir.join("src/bin"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".rs") {
            found.push(format!("src/bin/{name}"));
        } else if e.path().join("main.rs").is_file() {
            found.push(format!("src/bin/{name}/main.rs"));
        }
    }
    found.sort();
    for p in found {
        push(&mut roots, dir, &p, false);
    }
    (roots, lib_name)
}

/// Every `.rs` file under `dir`, recursively, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn rel(path: &Path, base: &Path) -> String {
    path.strip_prefix(base)
        .unwrap_or(path)
        .to_string_lossy()
        .replace('\\', "/")
}

// ---------------------------------------------------------------------------------------------
// Check 1: the file-level module graph has no cycle.

#[test]
fn no_file_import_cycles() {
    let root = workspace_root();
    let mut summary = String::new();
    let mut report = String::new();
    for dir in all_crate_dirs() {
        if !dir.join("Cargo.toml").is_file() {
            let _ = writeln!(summary, "{}: no Cargo.toml yet, skipped", rel(&dir, &root));
        }
    }
    for dir in crate_dirs() {
        let manifest = read_toml(&dir.join("Cargo.toml"));
        let name = package_name(&manifest);
        let (roots, lib_name) = crate_roots(&dir, &manifest);
        let load = |p: &str| fs::read_to_string(dir.join(p)).ok();
        let g = ModuleGraph::build(&roots, lib_name.as_deref(), &load);
        let cycles = g.cycles();
        let _ = writeln!(
            summary,
            "crate {name}: {} files, {} edges, {} cycles",
            g.files.len(),
            g.edges.len(),
            cycles.len()
        );
        let reached: BTreeSet<&str> = g.files.iter().map(String::as_str).collect();
        let unreached: Vec<String> = rust_files(&dir.join("src"))
            .iter()
            .map(|p| rel(p, &dir))
            .filter(|p| !reached.contains(p.as_str()))
            .collect();
        if !unreached.is_empty() {
            let _ = writeln!(
                summary,
                "  note: not in any module tree (not checked): {}",
                unreached.join(", ")
            );
        }
        if roots.is_empty() {
            let _ = writeln!(summary, "  note: no lib.rs or main.rs");
        }
        if !cycles.is_empty() || !g.problems.is_empty() {
            let _ = writeln!(report, "crate {name} ({}):", rel(&dir, &root));
            for p in &g.problems {
                let _ = writeln!(report, "  cannot check: {p}");
            }
            report.push_str(&g.cycle_report(&cycles));
        }
    }
    println!("file import cycles:\n{summary}");
    assert!(
        report.is_empty(),
        "file-level import cycles (a cycle's files cannot be split into layers; break each \
         cycle by moving the shared items down):\n{report}"
    );
}

/// A module-tree root: `src/lib.rs`, `src/main.rs`, `src/bin/*.rs`, a `[[bin]]` path.
#[derive(Clone, Debug)]
struct Root {
    path: String,
    is_lib: bool,
}

/// A path as written: its segments (raw identifiers unescaped) and whether it starts with `::`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PathRef {
    segs: Vec<String>,
    leading_colon: bool,
}

impl PathRef {
    fn text(&self) -> String {
        let p = self.segs.join("::");
        if self.leading_colon {
            format!("::{p}")
        } else {
            p
        }
    }
}

/// A `use` binding, resolved lazily from the module it appears in.
#[derive(Clone, Debug)]
struct Import {
    ctx: usize,
    path: PathRef,
    /// `pub use` (any visibility): a re-export, not by itself a reference.
    reexport: bool,
}

#[derive(Debug)]
struct Module {
    parent: Option<usize>,
    /// The root module of this module's tree (the library's or a binary's).
    root: usize,
    /// The file that holds this module's items (inline modules share their parent's).
    file: usize,
    children: BTreeMap<String, usize>,
    /// Items defined here (functions, types, traits, consts, statics, `macro_rules!`).
    defined: BTreeSet<String>,
    /// Names bound by `use` at module level.
    imports: BTreeMap<String, Import>,
    /// `use ...::*` at module level.
    globs: Vec<Import>,
}

/// A path named in non-test code of module `ctx`.
#[derive(Debug)]
struct RawRef {
    ctx: usize,
    path: PathRef,
}

/// Where the source files of a module tree are read from and where `mod x;` looks.
#[derive(Clone, Debug)]
struct FileCtx {
    file: usize,
    /// The directory of the source file.
    file_dir: String,
    /// Where `mod x;` looks for `x.rs` / `x/mod.rs`.
    child_dir: String,
    /// Inside an inline `mod m { ... }`.
    inline: bool,
}

/// The file-level module graph of one crate.
#[derive(Debug, Default)]
struct ModuleGraph {
    /// Source files, relative to the crate directory, in discovery order.
    files: Vec<String>,
    file_ids: BTreeMap<String, usize>,
    /// Files whose module is test-only (`#[cfg(test)] mod tests;`): nodes, but no edges out.
    test_files: BTreeSet<usize>,
    modules: Vec<Module>,
    lib_root: Option<usize>,
    lib_name: Option<String>,
    refs: Vec<RawRef>,
    /// (from, to) → the paths that make the edge.
    edges: BTreeMap<(usize, usize), BTreeSet<String>>,
    /// Module files not found, files that do not parse.
    problems: Vec<String>,
}

impl ModuleGraph {
    fn build(
        roots: &[Root],
        lib_name: Option<&str>,
        load: &dyn Fn(&str) -> Option<String>,
    ) -> Self {
        let mut g = ModuleGraph {
            lib_name: lib_name.map(str::to_string),
            ..ModuleGraph::default()
        };
        for r in roots {
            let Some(ast) = g.load_file(&r.path, load) else {
                continue;
            };
            let file = g.file_id(&r.path);
            let m = g.modules.len();
            g.modules.push(Module {
                parent: None,
                root: m,
                file,
                children: BTreeMap::new(),
                defined: BTreeSet::new(),
                imports: BTreeMap::new(),
                globs: Vec::new(),
            });
            if r.is_lib {
                g.lib_root = Some(m);
            }
            let dir = parent_dir(&r.path);
            let ctx = FileCtx {
                file,
                file_dir: dir.clone(),
                child_dir: dir,
                inline: false,
            };
            g.add_items(&ast.items, m, &ctx, false, load);
        }
        for r in std::mem::take(&mut g.refs) {
            // A one-segment path counts only when it names a re-export of its module (other
            // imports count at their `use`; the rest are locals, prelude or same-file items).
            let first = r.path.segs[0].as_str();
            let single = r.path.segs.len() == 1
                && !r.path.leading_colon
                && !matches!(first, "crate" | "$crate" | "self" | "super");
            if single
                && !g.modules[r.ctx]
                    .imports
                    .get(first)
                    .is_some_and(|i| i.reexport)
            {
                continue;
            }
            let Some(target) = g.resolve(r.ctx, &r.path.segs, r.path.leading_colon, 0) else {
                continue;
            };
            let (from, to) = (g.modules[r.ctx].file, g.modules[target].file);
            if from != to {
                g.edges.entry((from, to)).or_default().insert(r.path.text());
            }
        }
        g
    }

    fn file_id(&mut self, path: &str) -> usize {
        if let Some(&id) = self.file_ids.get(path) {
            return id;
        }
        let id = self.files.len();
        self.files.push(path.to_string());
        self.file_ids.insert(path.to_string(), id);
        id
    }

    fn load_file(
        &mut self,
        path: &str,
        load: &dyn Fn(&str) -> Option<String>,
    ) -> Option<syn::File> {
        let Some(text) = load(path) else {
            self.problems.push(format!("{path}: cannot read"));
            return None;
        };
        match syn::parse_file(&text) {
            Ok(ast) => Some(ast),
            Err(e) => {
                self.problems.push(format!("{path}: does not parse: {e}"));
                None
            }
        }
    }

    fn new_module(&mut self, parent: usize, name: &str, file: usize) -> usize {
        let id = self.modules.len();
        let root = self.modules[parent].root;
        self.modules.push(Module {
            parent: Some(parent),
            root,
            file,
            children: BTreeMap::new(),
            defined: BTreeSet::new(),
            imports: BTreeMap::new(),
            globs: Vec::new(),
        });
        self.modules[parent].children.insert(name.to_string(), id);
        id
    }

    /// Pass 1 over one module's items: child modules (loading their files), definitions,
    /// imports, and the paths that non-test code names.
    fn add_items(
        &mut self,
        items: &[Item],
        m: usize,
        ctx: &FileCtx,
        test: bool,
        load: &dyn Fn(&str) -> Option<String>,
    ) {
        for item in items {
            let item_test = test || is_test_only(item_attrs(item));
            match item {
                Item::Mod(im) => {
                    let name = im.ident.unraw().to_string();
                    if let Some((_, content)) = &im.content {
                        let child = self.new_module(m, &name, ctx.file);
                        let inner = FileCtx {
                            file: ctx.file,
                            file_dir: ctx.file_dir.clone(),
                            child_dir: join(&ctx.child_dir, &name),
                            inline: true,
                        };
                        self.add_items(content, child, &inner, item_test, load);
                        continue;
                    }
                    let (candidates, by_path_attr) = match path_attr(&im.attrs) {
                        Some(p) => {
                            let base = if ctx.inline {
                                &ctx.child_dir
                            } else {
                                &ctx.file_dir
                            };
                            (vec![join(base, &p)], true)
                        }
                        None => (
                            vec![
                                join(&ctx.child_dir, &format!("{name}.rs")),
                                join(&ctx.child_dir, &format!("{name}/mod.rs")),
                            ],
                            false,
                        ),
                    };
                    let found = candidates
                        .iter()
                        .find_map(|c| load(c).map(|t| (c.clone(), t)));
                    let Some((path, text)) = found else {
                        let decl = &self.files[ctx.file];
                        self.problems.push(format!(
                            "{decl}: `mod {name};` has no file (looked for {})",
                            candidates.join(", ")
                        ));
                        self.new_module(m, &name, ctx.file);
                        continue;
                    };
                    let ast = match syn::parse_file(&text) {
                        Ok(ast) => ast,
                        Err(e) => {
                            self.problems.push(format!("{path}: does not parse: {e}"));
                            self.new_module(m, &name, ctx.file);
                            continue;
                        }
                    };
                    let file = self.file_id(&path);
                    if item_test {
                        self.test_files.insert(file);
                    }
                    let child = self.new_module(m, &name, file);
                    let file_dir = parent_dir(&path);
                    // `mod.rs` and `#[path]` files keep their children beside them; `x.rs`
                    // keeps them in `x/`.
                    let child_dir = if by_path_attr || path.ends_with("/mod.rs") {
                        file_dir.clone()
                    } else {
                        join(&file_dir, &name)
                    };
                    let inner = FileCtx {
                        file,
                        file_dir,
                        child_dir,
                        inline: false,
                    };
                    self.add_items(&ast.items, child, &inner, item_test, load);
                }
                Item::Use(u) => {
                    let mut leaves = Vec::new();
                    let start = PathRef {
                        segs: Vec::new(),
                        leading_colon: u.leading_colon.is_some(),
                    };
                    flatten_use(&u.tree, start, &mut leaves);
                    let reexport = !matches!(u.vis, syn::Visibility::Inherited);
                    for leaf in leaves {
                        let import = Import {
                            ctx: m,
                            path: leaf.path.clone(),
                            reexport,
                        };
                        match &leaf.binding {
                            UseBinding::Name(n) => {
                                self.modules[m].imports.insert(n.clone(), import);
                            }
                            UseBinding::Glob => self.modules[m].globs.push(import),
                            UseBinding::Hidden => {}
                        }
                        // A re-export is followed from the paths that name it, not an edge itself.
                        if !item_test && !reexport {
                            self.refs.push(RawRef {
                                ctx: m,
                                path: leaf.path,
                            });
                        }
                    }
                }
                _ => {
                    if let Some(name) = item_name(item) {
                        self.modules[m].defined.insert(name);
                    }
                    if !item_test {
                        let mut c = Collector {
                            ctx: m,
                            refs: &mut self.refs,
                        };
                        c.visit_item(item);
                    }
                }
            }
        }
    }

    /// The module whose file holds what `path` names from module `ctx`; `None` for what lies
    /// outside the crate (other crates, the prelude, locals, `Self`).
    fn resolve(
        &self,
        ctx: usize,
        path: &[String],
        leading_colon: bool,
        depth: u32,
    ) -> Option<usize> {
        if depth > 32 || path.is_empty() {
            return None;
        }
        let first = path[0].as_str();
        if leading_colon {
            // `::name` names an extern crate: only the package's own library is ours.
            let lib = self.own_lib(ctx, first)?;
            return self.walk(lib, &path[1..], depth);
        }
        match first {
            "crate" | "$crate" => self.walk(self.modules[ctx].root, &path[1..], depth),
            "self" => self.walk(ctx, &path[1..], depth),
            "super" => {
                let mut m = ctx;
                let mut i = 0;
                while i < path.len() && path[i] == "super" {
                    m = self.modules[m].parent?;
                    i += 1;
                }
                self.walk(m, &path[i..], depth)
            }
            "Self" => None,
            _ => {
                if let Some(found) = self.lookup(ctx, path, depth) {
                    return found;
                }
                let lib = self.own_lib(ctx, first)?;
                self.walk(lib, &path[1..], depth)
            }
        }
    }

    /// Resolves `path` whose first segment is a name in module `m`'s scope: a child module,
    /// an item, an import, a glob import. `None` when `m` does not have the name.
    fn lookup(&self, m: usize, path: &[String], depth: u32) -> Option<Option<usize>> {
        let md = &self.modules[m];
        let name = &path[0];
        if let Some(&c) = md.children.get(name) {
            return Some(self.walk(c, &path[1..], depth));
        }
        if md.defined.contains(name) {
            return Some(Some(m));
        }
        if let Some(imp) = md.imports.get(name) {
            return Some(self.follow(imp, &path[1..], depth));
        }
        for g in &md.globs {
            let Some(gm) = self.resolve(g.ctx, &g.path.segs, g.path.leading_colon, depth + 1)
            else {
                continue;
            };
            if gm != m && self.has_name(gm, name) {
                return self.lookup(gm, path, depth + 1);
            }
        }
        None
    }

    fn has_name(&self, m: usize, name: &str) -> bool {
        let md = &self.modules[m];
        md.children.contains_key(name) || md.defined.contains(name) || md.imports.contains_key(name)
    }

    /// Walks `rest` down from module `m` as far as it names modules; the first segment that is
    /// not a module is an item of the module reached (followed through re-exports).
    fn walk(&self, m: usize, rest: &[String], depth: u32) -> Option<usize> {
        if rest.is_empty() {
            return Some(m);
        }
        match self.lookup(m, rest, depth + 1) {
            Some(found) => found,
            // Not known here (e.g. made by a macro): the module's own file.
            None => Some(m),
        }
    }

    fn follow(&self, imp: &Import, rest: &[String], depth: u32) -> Option<usize> {
        let mut segs = imp.path.segs.clone();
        segs.extend(rest.iter().cloned());
        self.resolve(imp.ctx, &segs, imp.path.leading_colon, depth + 1)
    }

    /// The library's root when `name` is the package's library named from a binary's tree.
    fn own_lib(&self, ctx: usize, name: &str) -> Option<usize> {
        let lib = self.lib_root?;
        (self.modules[ctx].root != lib && self.lib_name.as_deref() == Some(name)).then_some(lib)
    }

    /// Files in strongly connected components of more than one file, each sorted by path.
    fn cycles(&self) -> Vec<Vec<usize>> {
        let mut adj = vec![Vec::new(); self.files.len()];
        for &(a, b) in self.edges.keys() {
            adj[a].push(b);
        }
        let mut out: Vec<Vec<usize>> = tarjan_scc(&adj)
            .into_iter()
            .filter(|c| c.len() > 1)
            .map(|mut c| {
                c.sort_by(|&a, &b| self.files[a].cmp(&self.files[b]));
                c
            })
            .collect();
        out.sort_by(|a, b| self.files[a[0]].cmp(&self.files[b[0]]));
        out
    }

    /// Per cycle: its files, then each edge inside it with the paths that make it.
    fn cycle_report(&self, cycles: &[Vec<usize>]) -> String {
        let mut s = String::new();
        for (n, c) in cycles.iter().enumerate() {
            let names: Vec<&str> = c.iter().map(|&f| self.files[f].as_str()).collect();
            let _ = writeln!(
                s,
                "  cycle {} ({} files): {}",
                n + 1,
                c.len(),
                names.join(", ")
            );
            let members: BTreeSet<usize> = c.iter().copied().collect();
            let mut inside: Vec<(&(usize, usize), &BTreeSet<String>)> = self
                .edges
                .iter()
                .filter(|((a, b), _)| members.contains(a) && members.contains(b))
                .collect();
            inside.sort_by(|((a1, b1), _), ((a2, b2), _)| {
                (&self.files[*a1], &self.files[*b1]).cmp(&(&self.files[*a2], &self.files[*b2]))
            });
            for ((a, b), via) in inside {
                let via: Vec<&str> = via.iter().map(String::as_str).collect();
                let _ = writeln!(
                    s,
                    "    {} -> {} via {}",
                    self.files[*a],
                    self.files[*b],
                    via.join(", ")
                );
            }
        }
        s
    }
}

fn parent_dir(path: &str) -> String {
    match path.rfind('/') {
        Some(i) => path[..i].to_string(),
        None => String::new(),
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// `#[path = "..."]` on a `mod` declaration.
fn path_attr(attrs: &[Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| match &a.meta {
        Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// Whether the attributes make an item exist only in test builds: `#[test]`, or a `#[cfg]`
/// whose predicate implies `test` (`test`, `all(test, ..)`, `any(test, all(test, ..))`).
fn is_test_only(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| {
        // `#[test]`, `#[tokio::test]`
        if a.path().segments.last().is_some_and(|s| s.ident == "test") {
            return true;
        }
        if !a.path().is_ident("cfg") {
            return false;
        }
        a.parse_args::<Meta>().is_ok_and(|m| cfg_requires_test(&m))
    })
}

fn cfg_requires_test(meta: &Meta) -> bool {
    match meta {
        Meta::Path(p) => p.is_ident("test"),
        Meta::List(l) => {
            let Ok(nested) = l.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
            else {
                return false;
            };
            if l.path.is_ident("all") {
                nested.iter().any(cfg_requires_test)
            } else if l.path.is_ident("any") {
                !nested.is_empty() && nested.iter().all(cfg_requires_test)
            } else {
                false
            }
        }
        Meta::NameValue(_) => false,
    }
}

fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// The name an item defines in its module's namespace.
fn item_name(item: &Item) -> Option<String> {
    let ident = match item {
        Item::Const(i) => &i.ident,
        Item::Enum(i) => &i.ident,
        Item::Fn(i) => &i.sig.ident,
        Item::Static(i) => &i.ident,
        Item::Struct(i) => &i.ident,
        Item::Trait(i) => &i.ident,
        Item::TraitAlias(i) => &i.ident,
        Item::Type(i) => &i.ident,
        Item::Union(i) => &i.ident,
        Item::Macro(i) => i.ident.as_ref()?,
        _ => return None,
    };
    Some(ident.unraw().to_string())
}

/// What a `use` leaf binds in its module.
#[derive(Debug, PartialEq, Eq)]
enum UseBinding {
    Name(String),
    Glob,
    /// `use x as _;`
    Hidden,
}

#[derive(Debug)]
struct UseLeaf {
    path: PathRef,
    binding: UseBinding,
}

/// Flattens a use tree into full paths: `crate::{a::X, b::{self, c::Y}}` → `crate::a::X`,
/// `crate::b`, `crate::b::c::Y`.
fn flatten_use(tree: &UseTree, prefix: PathRef, out: &mut Vec<UseLeaf>) {
    let with = |p: &PathRef, seg: String| {
        let mut p = p.clone();
        p.segs.push(seg);
        p
    };
    match tree {
        UseTree::Path(p) => flatten_use(&p.tree, with(&prefix, p.ident.unraw().to_string()), out),
        UseTree::Name(n) => {
            let name = n.ident.unraw().to_string();
            if name == "self" && !prefix.segs.is_empty() {
                let bound = prefix.segs.last().cloned().unwrap_or_default();
                out.push(UseLeaf {
                    path: prefix,
                    binding: UseBinding::Name(bound),
                });
            } else {
                out.push(UseLeaf {
                    path: with(&prefix, name.clone()),
                    binding: UseBinding::Name(name),
                });
            }
        }
        UseTree::Rename(r) => {
            let name = r.ident.unraw().to_string();
            let path = if name == "self" && !prefix.segs.is_empty() {
                prefix
            } else {
                with(&prefix, name)
            };
            let rename = r.rename.unraw().to_string();
            let binding = if rename == "_" {
                UseBinding::Hidden
            } else {
                UseBinding::Name(rename)
            };
            out.push(UseLeaf { path, binding });
        }
        UseTree::Glob(_) => out.push(UseLeaf {
            path: prefix,
            binding: UseBinding::Glob,
        }),
        UseTree::Group(g) => {
            for t in &g.items {
                flatten_use(t, prefix.clone(), out);
            }
        }
    }
}

/// Collects the paths that non-test code names: expression, type, pattern, trait and macro
/// paths, `use` inside bodies, paths inside macro invocations and attribute arguments.
/// Visibility paths (`pub(super)`) are not references.
struct Collector<'a> {
    ctx: usize,
    refs: &'a mut Vec<RawRef>,
}

impl Collector<'_> {
    fn push(&mut self, path: PathRef) {
        if !path.segs.is_empty() {
            self.refs.push(RawRef {
                ctx: self.ctx,
                path,
            });
        }
    }
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item(&mut self, i: &'ast Item) {
        if !is_test_only(item_attrs(i)) {
            visit::visit_item(self, i);
        }
    }

    fn visit_item_use(&mut self, i: &'ast syn::ItemUse) {
        let mut leaves = Vec::new();
        let start = PathRef {
            segs: Vec::new(),
            leading_colon: i.leading_colon.is_some(),
        };
        flatten_use(&i.tree, start, &mut leaves);
        for leaf in leaves {
            self.push(leaf.path);
        }
    }

    fn visit_impl_item(&mut self, i: &'ast syn::ImplItem) {
        let attrs: &[Attribute] = match i {
            syn::ImplItem::Const(x) => &x.attrs,
            syn::ImplItem::Fn(x) => &x.attrs,
            syn::ImplItem::Type(x) => &x.attrs,
            syn::ImplItem::Macro(x) => &x.attrs,
            _ => &[],
        };
        if !is_test_only(attrs) {
            visit::visit_impl_item(self, i);
        }
    }

    fn visit_trait_item(&mut self, i: &'ast syn::TraitItem) {
        let attrs: &[Attribute] = match i {
            syn::TraitItem::Const(x) => &x.attrs,
            syn::TraitItem::Fn(x) => &x.attrs,
            syn::TraitItem::Type(x) => &x.attrs,
            syn::TraitItem::Macro(x) => &x.attrs,
            _ => &[],
        };
        if !is_test_only(attrs) {
            visit::visit_trait_item(self, i);
        }
    }

    fn visit_field(&mut self, i: &'ast syn::Field) {
        if !is_test_only(&i.attrs) {
            visit::visit_field(self, i);
        }
    }

    fn visit_variant(&mut self, i: &'ast syn::Variant) {
        if !is_test_only(&i.attrs) {
            visit::visit_variant(self, i);
        }
    }

    fn visit_arm(&mut self, i: &'ast syn::Arm) {
        if !is_test_only(&i.attrs) {
            visit::visit_arm(self, i);
        }
    }

    fn visit_local(&mut self, i: &'ast syn::Local) {
        if !is_test_only(&i.attrs) {
            visit::visit_local(self, i);
        }
    }

    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_path(&mut self, p: &'ast syn::Path) {
        self.push(PathRef {
            segs: p
                .segments
                .iter()
                .map(|s| s.ident.unraw().to_string())
                .collect(),
            leading_colon: p.leading_colon.is_some(),
        });
        visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.visit_path(&m.path);
        scan_tokens(m.tokens.clone(), &mut |p| self.push(p));
    }

    fn visit_attribute(&mut self, a: &'ast Attribute) {
        let p = a.path();
        if p.is_ident("doc") || p.is_ident("cfg") || p.is_ident("cfg_attr") {
            return;
        }
        match &a.meta {
            Meta::List(l) => scan_tokens(l.tokens.clone(), &mut |p| self.push(p)),
            Meta::NameValue(nv) => self.visit_expr(&nv.value),
            Meta::Path(_) => {}
        }
    }
}

/// Finds `a::b::c` (and `$crate::x`) runs of identifiers in unparsed tokens (macro input,
/// attribute arguments). Runs that continue a longer path (after `::`) or follow `.` are
/// skipped.
fn scan_tokens(ts: TokenStream, found: &mut dyn FnMut(PathRef)) {
    let tokens: Vec<TokenTree> = ts.into_iter().collect();
    let is_punct =
        |t: Option<&TokenTree>, c: char| matches!(t, Some(TokenTree::Punct(p)) if p.as_char() == c);
    let colon2_at = |j: usize| {
        matches!(tokens.get(j), Some(TokenTree::Punct(p)) if p.as_char() == ':' && p.spacing() == Spacing::Joint)
            && is_punct(tokens.get(j + 1), ':')
    };
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            TokenTree::Group(g) => {
                scan_tokens(g.stream(), found);
                i += 1;
            }
            TokenTree::Ident(id) => {
                let after_colon2 = i >= 2 && colon2_at(i - 2);
                let after_dot = i >= 1 && is_punct(tokens.get(i - 1), '.');
                let dollar = i >= 1 && is_punct(tokens.get(i - 1), '$');
                let mut segs = vec![unraw(&id.to_string())];
                if dollar && segs[0] == "crate" {
                    segs[0] = "$crate".to_string();
                }
                let mut j = i + 1;
                while colon2_at(j) {
                    match tokens.get(j + 2) {
                        Some(TokenTree::Ident(next)) => {
                            segs.push(unraw(&next.to_string()));
                            j += 3;
                        }
                        _ => break,
                    }
                }
                if !after_colon2 && !after_dot {
                    found(PathRef {
                        segs,
                        leading_colon: false,
                    });
                }
                i = j;
            }
            _ => i += 1,
        }
    }
}

fn unraw(s: &str) -> String {
    s.strip_prefix("r#").unwrap_or(s).to_string()
}

/// Tarjan's strongly connected components of a graph given as adjacency lists; every node is
/// in exactly one component.
fn tarjan_scc(adj: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        adj: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn connect(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in &s.adj[v] {
            match s.index[w] {
                None => {
                    connect(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                comp.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(comp);
        }
    }
    let n = adj.len();
    let mut s = State {
        adj,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            connect(&mut s, v);
        }
    }
    s.out
}

// ---------------------------------------------------------------------------------------------
// Check 2: crates depend only downwards.

#[test]
fn no_upward_crate_dependencies() {
    let root = workspace_root();
    let root_manifest = read_toml(&root.join("Cargo.toml"));
    let ws_deps = root_manifest
        .get("workspace")
        .and_then(|w| w.get("dependencies"))
        .and_then(|d| d.as_table())
        .cloned()
        .unwrap_or_default();
    let mut manifests = Vec::new();
    let mut problems = Vec::new();
    for dir in crate_dirs() {
        let path = dir.join("Cargo.toml");
        let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        match Manifest::parse(&rel(&path, &root), &text, &ws_deps) {
            Ok(m) => manifests.push(m),
            Err(e) => problems.push(e),
        }
    }
    let (summary, more) = dependency_problems(&manifests);
    problems.extend(more);
    println!("crate dependencies:\n{summary}");
    assert!(
        problems.is_empty(),
        "crate layering violated (allow-list: ALLOWED in tests/tests/layering.rs):\n  {}",
        problems.join("\n  ")
    );
}

/// A crate's manifest, as far as layering goes.
#[derive(Debug)]
struct Manifest {
    /// `crates/x/Cargo.toml`
    path: String,
    package: String,
    deps: Vec<Dep>,
}

/// One entry of [dependencies] / [build-dependencies] (also under [target.*]).
#[derive(Debug)]
struct Dep {
    section: String,
    key: String,
    /// The package it names (through `package = ` and workspace aliases).
    package: String,
    /// A path dependency: a crate of this workspace.
    local: bool,
}

impl Manifest {
    fn parse(path: &str, text: &str, ws_deps: &toml::Table) -> Result<Self, String> {
        let t: toml::Table = text.parse().map_err(|e| format!("{path}: {e}"))?;
        let package = t
            .get("package")
            .and_then(|p| p.get("name"))
            .and_then(|n| n.as_str())
            .ok_or_else(|| format!("{path}: no [package] name"))?
            .to_string();
        let mut sections: Vec<(String, &toml::Table)> = Vec::new();
        for s in ["dependencies", "build-dependencies", "build_dependencies"] {
            if let Some(d) = t.get(s).and_then(|d| d.as_table()) {
                sections.push((s.to_string(), d));
            }
        }
        for (cfg, tt) in t
            .get("target")
            .and_then(|x| x.as_table())
            .into_iter()
            .flatten()
        {
            for s in ["dependencies", "build-dependencies", "build_dependencies"] {
                if let Some(d) = tt.get(s).and_then(|d| d.as_table()) {
                    sections.push((format!("target.{cfg}.{s}"), d));
                }
            }
        }
        let mut deps = Vec::new();
        for (section, table) in sections {
            for (key, spec) in table {
                let spec = match spec.get("workspace").and_then(|w| w.as_bool()) {
                    Some(true) => ws_deps.get(key).ok_or_else(|| {
                        format!(
                            "{path} [{section}] `{key}.workspace = true`, but the root Cargo.toml \
                             has no [workspace.dependencies] `{key}`"
                        )
                    })?,
                    _ => spec,
                };
                let package = spec
                    .get("package")
                    .and_then(|p| p.as_str())
                    .unwrap_or(key)
                    .to_string();
                let local = spec.get("path").is_some();
                deps.push(Dep {
                    section: section.clone(),
                    key: key.clone(),
                    package,
                    local,
                });
            }
        }
        Ok(Manifest {
            path: path.to_string(),
            package,
            deps,
        })
    }
}

/// A per-crate summary and the layering problems of a set of workspace manifests.
fn dependency_problems(manifests: &[Manifest]) -> (String, Vec<String>) {
    let ours: BTreeSet<&str> = manifests.iter().map(|m| m.package.as_str()).collect();
    let mut summary = String::new();
    let mut problems = Vec::new();
    for m in manifests {
        let internal: Vec<&Dep> = m
            .deps
            .iter()
            .filter(|d| d.local || ours.contains(d.package.as_str()))
            .filter(|d| !FEATURE_PINS.iter().any(|(p, _)| *p == d.package))
            .collect();
        let mut names: Vec<&str> = internal.iter().map(|d| d.package.as_str()).collect();
        names.sort();
        names.dedup();
        let layer = LAYERS
            .iter()
            .find(|(n, _)| *n == m.package)
            .map_or("?".to_string(), |(_, l)| l.to_string());
        let _ = writeln!(
            summary,
            "crate {} (layer {layer}): depends on [{}]",
            m.package,
            names.join(", ")
        );
        match ALLOWED.iter().find(|(n, _)| *n == m.package) {
            None => problems.push(format!(
                "{} ({}) is not in ALLOWED: add it to the table at the top of \
                 tests/tests/layering.rs (and to LAYERS) with the workspace crates it may \
                 depend on",
                m.package, m.path
            )),
            Some((_, allowed)) => {
                for d in &internal {
                    if !allowed.contains(&d.package.as_str()) {
                        problems.push(format!(
                            "{} depends on {} ({} [{}] `{}`): not allowed; {} may depend on [{}]",
                            m.package,
                            d.package,
                            m.path,
                            d.section,
                            d.key,
                            m.package,
                            allowed.join(", ")
                        ));
                    }
                }
            }
        }
        if NO_SERVER_STACK.contains(&m.package.as_str()) {
            for d in &m.deps {
                if SERVER_STACK.contains(&d.package.as_str()) {
                    problems.push(format!(
                        "{} depends on {} ({} [{}] `{}`): the server stack ({}) belongs above \
                         cix-engine",
                        m.package,
                        d.package,
                        m.path,
                        d.section,
                        d.key,
                        SERVER_STACK.join(", ")
                    ));
                }
            }
        }
    }
    (summary, problems)
}

// ---------------------------------------------------------------------------------------------
// Check 3: long files say why.

/// A feature-pin package may be depended on from any layer only because it has no code: its
/// sources are `src/lib.rs` of inner doc comments and an empty `build.rs`.
#[test]
fn feature_pin_crates_hold_no_code() {
    for (package, dir) in FEATURE_PINS {
        let dir = workspace_root().join(dir);
        assert_eq!(
            package_name(&read_toml(&dir.join("Cargo.toml"))),
            *package,
            "{}",
            dir.display()
        );
        let files: Vec<String> = rust_files(&dir).iter().map(|f| rel(f, &dir)).collect();
        assert_eq!(
            files,
            ["build.rs", "src/lib.rs"],
            "{package}: only these two files"
        );
        let lib = fs::read_to_string(dir.join("src/lib.rs")).unwrap();
        let code: Vec<&str> = lib
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with("//!"))
            .collect();
        assert!(code.is_empty(), "{package}/src/lib.rs holds code: {code:?}");
        let build = fs::read_to_string(dir.join("build.rs")).unwrap();
        assert_eq!(
            build.trim(),
            "fn main() {}",
            "{package}/build.rs does something"
        );
    }
}

#[test]
fn long_files_state_a_reason() {
    let root = workspace_root();
    let mut long = Vec::new();
    let mut problems = Vec::new();
    for dir in all_crate_dirs() {
        for f in rust_files(&dir.join("src")) {
            let text = fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            let path = rel(&f, &root);
            let lines = text.lines().count();
            if lines > LONG_FILE_LINES {
                long.push(format!("{path} ({lines} lines)"));
            }
            if let Some(p) = long_file_problem(&path, &text) {
                problems.push(p);
            }
        }
    }
    println!(
        "long files (over {LONG_FILE_LINES} lines): {} ({} without a reason)\n  {}\n",
        long.len(),
        problems.len(),
        long.join("\n  ")
    );
    assert!(
        problems.is_empty(),
        "files over {LONG_FILE_LINES} lines without a `{LONG_FILE_MARK} <reason>` line in their \
         first {LONG_FILE_HEADER_LINES} lines (split them, or say why they stay whole):\n  {}",
        problems.join("\n  ")
    );
}

fn long_file_problem(path: &str, text: &str) -> Option<String> {
    let lines = text.lines().count();
    if lines <= LONG_FILE_LINES {
        return None;
    }
    let stated = text
        .lines()
        .take(LONG_FILE_HEADER_LINES)
        .any(|l| l.trim_start().starts_with(LONG_FILE_MARK));
    (!stated).then(|| format!("{path}: {lines} lines"))
}

// ---------------------------------------------------------------------------------------------
// The checker's own tests, on small in-memory crates.

mod checker {
    use super::*;

    /// Builds the graph of an in-memory crate whose roots are `src/lib.rs` (library `mylib`)
    /// and `src/main.rs`, where present.
    fn graph(files: &[(&str, &str)]) -> ModuleGraph {
        let map: BTreeMap<String, String> = files
            .iter()
            .map(|(p, s)| (p.to_string(), s.to_string()))
            .collect();
        let mut roots = Vec::new();
        for (path, is_lib) in [("src/lib.rs", true), ("src/main.rs", false)] {
            if map.contains_key(path) {
                roots.push(Root {
                    path: path.to_string(),
                    is_lib,
                });
            }
        }
        let load = |p: &str| map.get(p).cloned();
        ModuleGraph::build(&roots, Some("mylib"), &load)
    }

    /// Edges as (from, to, [via]).
    fn edges(g: &ModuleGraph) -> Vec<(String, String, Vec<String>)> {
        g.edges
            .iter()
            .map(|((a, b), via)| {
                (
                    g.files[*a].clone(),
                    g.files[*b].clone(),
                    via.iter().cloned().collect(),
                )
            })
            .collect()
    }

    fn edge_pairs(g: &ModuleGraph) -> BTreeSet<(String, String)> {
        edges(g).into_iter().map(|(a, b, _)| (a, b)).collect()
    }

    fn pairs(list: &[(&str, &str)]) -> BTreeSet<(String, String)> {
        list.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    fn via(g: &ModuleGraph, from: &str, to: &str) -> Vec<String> {
        edges(g)
            .into_iter()
            .find(|(a, b, _)| a == from && b == to)
            .map(|(_, _, v)| v)
            .unwrap_or_default()
    }

    #[test]
    fn module_files_are_found_and_mod_declarations_are_not_edges() {
        let g = graph(&[
            ("src/lib.rs", "pub mod a; mod d;"),
            ("src/a.rs", "pub mod b; mod inner { pub mod c; }"),
            ("src/a/b.rs", ""),
            ("src/a/inner/c.rs", ""),
            ("src/d/mod.rs", "mod e;"),
            ("src/d/e.rs", ""),
        ]);
        assert!(g.problems.is_empty(), "{:?}", g.problems);
        let files: BTreeSet<&str> = g.files.iter().map(String::as_str).collect();
        let want: BTreeSet<&str> = [
            "src/lib.rs",
            "src/a.rs",
            "src/a/b.rs",
            "src/a/inner/c.rs",
            "src/d/mod.rs",
            "src/d/e.rs",
        ]
        .into_iter()
        .collect();
        assert_eq!(files, want);
        assert!(g.edges.is_empty(), "{:?}", edges(&g));
    }

    #[test]
    fn missing_module_file_is_a_problem() {
        let g = graph(&[("src/lib.rs", "mod gone;")]);
        assert_eq!(g.problems.len(), 1);
        assert!(g.problems[0].contains("mod gone;"), "{}", g.problems[0]);
        let g = graph(&[("src/lib.rs", "mod a;"), ("src/a.rs", "fn (")]);
        assert!(
            g.problems[0].contains("src/a.rs: does not parse"),
            "{:?}",
            g.problems
        );
    }

    #[test]
    fn grouped_and_nested_use_trees() {
        let g = graph(&[
            ("src/lib.rs", "mod a; mod b; mod c;"),
            ("src/a.rs", "use crate::{b::X, c::{self, deep::Y}};"),
            ("src/b.rs", "pub struct X;"),
            ("src/c.rs", "pub mod deep;"),
            ("src/c/deep.rs", "pub struct Y;"),
        ]);
        assert_eq!(
            edge_pairs(&g),
            pairs(&[
                ("src/a.rs", "src/b.rs"),
                ("src/a.rs", "src/c.rs"),
                ("src/a.rs", "src/c/deep.rs")
            ])
        );
        assert_eq!(via(&g, "src/a.rs", "src/c.rs"), ["crate::c"]);
        assert_eq!(via(&g, "src/a.rs", "src/c/deep.rs"), ["crate::c::deep::Y"]);
    }

    #[test]
    fn self_super_and_inline_paths() {
        let g = graph(&[
            ("src/lib.rs", "mod a; mod b; mod c; mod d; pub mod m;"),
            (
                "src/a.rs",
                "pub fn f(_: crate::d::T) -> u32 { crate::b::g(); super::c::h(); \
                 let _v: Vec<crate::m::x::Z> = Vec::new(); 1 }",
            ),
            (
                "src/m/mod.rs",
                "pub mod x; use self::x::Z; pub fn here() {}",
            ),
            ("src/m/x.rs", "pub struct Z; fn k() { super::here(); }"),
            ("src/b.rs", ""),
            ("src/c.rs", ""),
            ("src/d.rs", ""),
        ]);
        assert_eq!(
            edge_pairs(&g),
            pairs(&[
                ("src/a.rs", "src/b.rs"),
                ("src/a.rs", "src/c.rs"),
                ("src/a.rs", "src/d.rs"),
                ("src/a.rs", "src/m/x.rs"),
                ("src/m/mod.rs", "src/m/x.rs"),
                ("src/m/x.rs", "src/m/mod.rs"),
            ])
        );
        assert_eq!(via(&g, "src/a.rs", "src/b.rs"), ["crate::b::g"]);
        assert_eq!(via(&g, "src/a.rs", "src/c.rs"), ["super::c::h"]);
        assert_eq!(via(&g, "src/m/x.rs", "src/m/mod.rs"), ["super::here"]);
    }

    #[test]
    fn names_in_scope_and_extern_crates() {
        let g = graph(&[
            ("src/lib.rs", "mod a; mod b; mod http; mod other;"),
            (
                "src/a.rs",
                "use crate::b; use std::fmt; fn f() { b::g(); fmt::Write; serde::Serialize; }",
            ),
            ("src/b.rs", "pub fn g() {}"),
            // `http` inside module `http` is the extern crate (no child named so).
            (
                "src/http.rs",
                "use http::Request; fn f() { http::Method::GET; }",
            ),
            ("src/other.rs", "use http::Request;"),
        ]);
        assert_eq!(edge_pairs(&g), pairs(&[("src/a.rs", "src/b.rs")]));
        assert_eq!(via(&g, "src/a.rs", "src/b.rs"), ["b::g", "crate::b"]);
    }

    #[test]
    fn root_reexports_are_followed() {
        let g = graph(&[
            (
                "src/lib.rs",
                "mod m; mod n; mod p; mod q; pub use m::Item; pub use n::{A, B as Bee}; \
                 pub use p::*; pub use format::External; pub fn root_fn() -> A { A }",
            ),
            // `crate::root_fn` is lib.rs's own; lib.rs only re-exports `Item`: no cycle.
            ("src/m.rs", "pub struct Item; fn f() { crate::root_fn(); }"),
            ("src/n.rs", "pub struct A; pub struct B;"),
            ("src/p.rs", "pub struct PItem;"),
            (
                "src/q.rs",
                "use crate::{Item, A}; fn f() { crate::Bee::new(); crate::PItem; \
                 crate::External::x(); crate::root_fn(); }",
            ),
        ]);
        assert_eq!(
            edge_pairs(&g),
            pairs(&[
                ("src/lib.rs", "src/n.rs"),
                ("src/m.rs", "src/lib.rs"),
                ("src/q.rs", "src/m.rs"),
                ("src/q.rs", "src/n.rs"),
                ("src/q.rs", "src/p.rs"),
                ("src/q.rs", "src/lib.rs"),
            ])
        );
        assert_eq!(
            via(&g, "src/q.rs", "src/n.rs"),
            ["crate::A", "crate::Bee::new"]
        );
        assert_eq!(via(&g, "src/q.rs", "src/lib.rs"), ["crate::root_fn"]);
        assert_eq!(via(&g, "src/lib.rs", "src/n.rs"), ["A"]);
        assert!(g.cycles().is_empty());
    }

    #[test]
    fn reexports_in_inner_modules_are_followed() {
        let g = graph(&[
            ("src/lib.rs", "pub mod mem; mod user;"),
            (
                "src/mem/mod.rs",
                "pub mod wal; pub use wal::Wal; pub use format::now;",
            ),
            ("src/mem/wal.rs", "pub struct Wal;"),
            ("src/user.rs", "use crate::mem::{Wal, now};"),
        ]);
        assert_eq!(edge_pairs(&g), pairs(&[("src/user.rs", "src/mem/wal.rs")]));
    }

    #[test]
    fn test_code_is_skipped() {
        let g = graph(&[
            ("src/lib.rs", "mod a; mod b; mod c;"),
            (
                "src/a.rs",
                "#[cfg(test)] mod tests { use crate::b::X; fn t() { crate::c::f(); } }
                 #[cfg(all(test, feature = \"gpu\"))] fn gpu() { crate::c::f(); }
                 #[test] fn plain() { crate::c::f(); }
                 #[cfg(test)] mod more;
                 #[cfg(any(test, feature = \"x\"))] fn maybe() { crate::b::g(); }",
            ),
            ("src/a/more.rs", "use crate::c::f;"),
            ("src/b.rs", ""),
            ("src/c.rs", ""),
        ]);
        assert!(g.problems.is_empty(), "{:?}", g.problems);
        assert!(g.file_ids.contains_key("src/a/more.rs"));
        assert!(g.test_files.contains(&g.file_ids["src/a/more.rs"]));
        assert_eq!(edge_pairs(&g), pairs(&[("src/a.rs", "src/b.rs")]));
        assert_eq!(via(&g, "src/a.rs", "src/b.rs"), ["crate::b::g"]);
    }

    #[test]
    fn visibility_paths_are_not_edges() {
        let g = graph(&[
            ("src/lib.rs", "mod a; pub fn top() {}"),
            (
                "src/a.rs",
                "pub(super) fn f() {} pub(in crate) struct S { pub(crate) x: u8 }",
            ),
        ]);
        assert!(g.edges.is_empty(), "{:?}", edges(&g));
    }

    #[test]
    fn paths_inside_macros_and_attributes() {
        let g = graph(&[
            ("src/lib.rs", "mod a; mod b; mod c; mod d;"),
            (
                "src/a.rs",
                "fn f(x: u8) { println!(\"{}\", crate::b::NAME); assert!(super::c::ok(x.r#type)); }
                 #[derive(clap::Parser)] struct Args { #[arg(default_value_t = crate::d::N)] n: u8 }",
            ),
            ("src/b.rs", ""),
            ("src/c.rs", ""),
            ("src/d.rs", ""),
        ]);
        assert_eq!(
            edge_pairs(&g),
            pairs(&[
                ("src/a.rs", "src/b.rs"),
                ("src/a.rs", "src/c.rs"),
                ("src/a.rs", "src/d.rs")
            ])
        );
    }

    #[test]
    fn token_scan_finds_whole_paths_only() {
        let ts: TokenStream =
            "a::b::c(x.y::z, ::ext::p, Vec::<u8>::new(), $crate::m::n, r#type::k)"
                .parse()
                .unwrap();
        let mut got = Vec::new();
        scan_tokens(ts, &mut |p| got.push(p.segs.join("::")));
        assert_eq!(
            got,
            ["a::b::c", "x", "Vec", "u8", "$crate::m::n", "type::k"]
        );
    }

    #[test]
    fn binaries_name_the_library_by_its_crate_name() {
        let g = graph(&[
            ("src/lib.rs", "pub mod b; pub mod c; pub use c::Thing;"),
            ("src/b.rs", "pub struct X;"),
            ("src/c.rs", "pub struct Thing;"),
            (
                "src/main.rs",
                "mod cli; use mylib::b::X; fn main() { mylib::Thing::new(); cli::run(); }",
            ),
            (
                "src/cli.rs",
                "pub fn run() { crate::helper(); ::mylib::b::X; }",
            ),
        ]);
        assert_eq!(
            edge_pairs(&g),
            pairs(&[
                ("src/main.rs", "src/b.rs"),
                ("src/main.rs", "src/c.rs"),
                ("src/main.rs", "src/cli.rs"),
                ("src/cli.rs", "src/main.rs"),
                ("src/cli.rs", "src/b.rs"),
            ])
        );
    }

    #[test]
    fn glob_imports_resolve_names() {
        let g = graph(&[
            ("src/lib.rs", "mod a; mod b; mod c; mod d;"),
            // A glob re-export is no edge; a private glob import is.
            ("src/b.rs", "pub use crate::c::*; use crate::d::*;"),
            ("src/c.rs", "pub mod inner { pub fn f() {} }"),
            ("src/d.rs", ""),
            ("src/a.rs", "fn f() { crate::b::inner::f(); }"),
        ]);
        assert_eq!(
            edge_pairs(&g),
            pairs(&[("src/a.rs", "src/c.rs"), ("src/b.rs", "src/d.rs")])
        );
    }

    #[test]
    fn tarjan_finds_components() {
        // 0 -> 1 -> 2 -> 0, 2 -> 3, 3 -> 4 -> 3, 5 -> 5, 6 alone.
        let adj = vec![
            vec![1],
            vec![2],
            vec![0, 3],
            vec![4],
            vec![3],
            vec![5],
            vec![],
        ];
        let mut comps: Vec<Vec<usize>> = tarjan_scc(&adj)
            .into_iter()
            .map(|mut c| {
                c.sort();
                c
            })
            .collect();
        comps.sort();
        assert_eq!(comps, vec![vec![0, 1, 2], vec![3, 4], vec![5], vec![6]]);
    }

    #[test]
    fn cycles_are_reported_with_their_paths() {
        let g = graph(&[
            ("src/lib.rs", "mod engine; mod tools; mod leaf;"),
            (
                "src/engine.rs",
                "use crate::leaf::L; fn f() { crate::tools::ms(); }",
            ),
            (
                "src/tools.rs",
                "use crate::engine::{Engine, NodeRef}; pub fn ms() {}",
            ),
            ("src/leaf.rs", "pub struct L;"),
        ]);
        let cycles = g.cycles();
        assert_eq!(cycles.len(), 1);
        let report = g.cycle_report(&cycles);
        assert!(
            report.contains("cycle 1 (2 files): src/engine.rs, src/tools.rs"),
            "{report}"
        );
        assert!(
            report.contains("src/engine.rs -> src/tools.rs via crate::tools::ms"),
            "{report}"
        );
        assert!(
            report.contains(
                "src/tools.rs -> src/engine.rs via crate::engine::Engine, crate::engine::NodeRef"
            ),
            "{report}"
        );
        assert!(!report.contains("leaf"), "{report}");
    }

    fn ws_deps() -> toml::Table {
        r#"
        format = { path = "crates/format", package = "cix-format" }
        indexer = { path = "crates/indexer", package = "cix-indexer" }
        queryd = { path = "crates/queryd", package = "cix-queryd" }
        tokio = { version = "1" }
        serde = "1"
        "#
        .parse()
        .unwrap()
    }

    fn manifest(path: &str, text: &str) -> Manifest {
        Manifest::parse(path, text, &ws_deps()).unwrap()
    }

    #[test]
    fn dependencies_resolve_workspace_aliases() {
        let m = manifest(
            "crates/code/Cargo.toml",
            r#"
            [package]
            name = "cix-code"
            [dependencies]
            format.workspace = true
            serde = { workspace = true, features = ["derive"] }
            renamed = { path = "../other", package = "cix-other" }
            [build-dependencies]
            tokio.workspace = true
            [target.'cfg(unix)'.dependencies]
            queryd = { workspace = true }
            [dev-dependencies]
            indexer.workspace = true
            "#,
        );
        let got: Vec<(String, String, bool)> = m
            .deps
            .iter()
            .map(|d| (d.section.clone(), d.package.clone(), d.local))
            .collect();
        let want = [
            ("dependencies", "cix-format", true),
            ("dependencies", "cix-other", true),
            ("dependencies", "serde", false),
            ("build-dependencies", "tokio", false),
            ("target.cfg(unix).dependencies", "cix-queryd", true),
        ];
        let want: Vec<(String, String, bool)> = want
            .iter()
            .map(|(s, p, l)| (s.to_string(), p.to_string(), *l))
            .collect();
        assert_eq!(got, want);
        let err = Manifest::parse(
            "crates/x/Cargo.toml",
            "[package]\nname = \"x\"\n[dependencies]\nnope.workspace = true\n",
            &ws_deps(),
        )
        .unwrap_err();
        assert!(err.contains("no [workspace.dependencies] `nope`"), "{err}");
    }

    #[test]
    fn upward_and_unknown_dependencies_are_problems() {
        let ms = vec![
            manifest(
                "crates/format/Cargo.toml",
                "[package]\nname = \"cix-format\"\n[dependencies]\nserde.workspace = true\n",
            ),
            manifest(
                "crates/indexer/Cargo.toml",
                "[package]\nname = \"cix-indexer\"\n[dependencies]\nformat.workspace = true\n\
                 queryd.workspace = true\n[dev-dependencies]\nqueryd.workspace = true\n",
            ),
            manifest(
                "crates/queryd/Cargo.toml",
                "[package]\nname = \"cix-queryd\"\n[dependencies]\nindexer.workspace = true\n\
                 tokio.workspace = true\n",
            ),
            manifest(
                "crates/engine/Cargo.toml",
                "[package]\nname = \"cix-engine\"\n[dependencies]\ntokio.workspace = true\n",
            ),
            manifest("crates/new/Cargo.toml", "[package]\nname = \"cix-new\"\n"),
        ];
        let (summary, problems) = dependency_problems(&ms);
        assert!(
            summary.contains("crate cix-indexer (layer 2): depends on [cix-format, cix-queryd]"),
            "{summary}"
        );
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert!(
            problems[0].starts_with("cix-indexer depends on cix-queryd"),
            "{}",
            problems[0]
        );
        assert!(
            problems[1].starts_with("cix-engine depends on tokio"),
            "{}",
            problems[1]
        );
        assert!(
            problems[2].starts_with("cix-new (crates/new/Cargo.toml) is not in ALLOWED"),
            "{}",
            problems[2]
        );
    }

    #[test]
    fn allowed_table_only_points_down() {
        for &(name, deps) in ALLOWED {
            let layer = |n: &str| {
                LAYERS
                    .iter()
                    .find(|(l, _)| *l == n)
                    .map(|(_, x)| *x)
                    .unwrap_or_else(|| panic!("{n} is not in LAYERS"))
            };
            for &d in deps {
                assert!(
                    layer(d) < layer(name),
                    "{name} (layer {}) may not depend on {d} (layer {})",
                    layer(name),
                    layer(d)
                );
            }
        }
        assert_eq!(ALLOWED.len(), LAYERS.len());
    }

    #[test]
    fn long_files_need_the_mark_near_the_top() {
        let body = |n: usize| "fn x() {}\n".repeat(n);
        assert_eq!(long_file_problem("a.rs", &body(LONG_FILE_LINES)), None);
        assert_eq!(
            long_file_problem("a.rs", &body(LONG_FILE_LINES + 1)),
            Some(format!("a.rs: {} lines", LONG_FILE_LINES + 1))
        );
        let marked = format!("//! Parser.\n//! Long file: one grammar.\n{}", body(2000));
        assert_eq!(long_file_problem("a.rs", &marked), None);
        let late = format!(
            "{}//! Long file: too late.\n{}",
            body(LONG_FILE_HEADER_LINES),
            body(2000)
        );
        assert!(long_file_problem("a.rs", &late).is_some());
    }
}
