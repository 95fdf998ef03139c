//! Source file → chunks, symbols and raw graph facts, with tree-sitter for code and line
//! windows for everything else. Pure functions: no I/O, no embedding, no cross-file resolution
//! (that is `crate::graph`).
//!
//! Layout: this file holds the shared types, the language-independent chunking engine (symbol
//! tree → chunks, long-body splitting, top-level leftovers, line windows) and the call/import
//! walk; each language family has a small [`Spec`] implementation in its own file that says which
//! tree-sitter nodes are symbols, imports and calls.
//!
//! Call filtering: Rust macros are not calls (they are `macro_invocation` nodes); a short list of
//! builtins per language (`print`/`len`/`isinstance`… in Python, `append`/`make`/`len`… and
//! conversions in Go, `Some`/`Ok`/`Err` in Rust, `require`/`super`/`import()` in JS/TS) is
//! dropped because such names would only ever resolve to unrelated user symbols.

use std::collections::HashMap;
use std::path::Path;

use tree_sitter::Node;

mod c;
mod go;
mod java;
mod js;
mod python;
mod rust;
mod text;

/// A language the indexer recognises. Code languages are parsed with tree-sitter; the rest are
/// cut into line windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Language {
    Rust,
    Python,
    TypeScript,
    Tsx,
    JavaScript,
    Go,
    Java,
    C,
    Cpp,
    Markdown,
    Toml,
    Yaml,
    Json,
    Shell,
    /// Any other text file.
    Text,
}

/// What a chunk is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChunkKind {
    Function,
    Method,
    Class,
    Struct,
    Enum,
    Trait,
    Interface,
    Impl,
    Module,
    /// A later piece of a long function/method body split at statement boundaries; its text starts
    /// with the signature of the symbol it belongs to, as context.
    BodyPart,
    /// Top-level code that belongs to no symbol (imports, constants, statements), as windows.
    TopLevel,
    /// A line window of a non-code file.
    Window,
}

/// One chunk of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub kind: ChunkKind,
    /// Simple name of the symbol (`parse`), empty for TopLevel/Window.
    pub name: String,
    /// Qualified name inside the file (`Parser#parse`, `mod_a/Parser#parse`), empty if none.
    pub qualified: String,
    /// SCIP-like symbol id `<lang> <repo> <path>/<Qualified#name>().`; empty for chunks that are not symbols.
    pub symbol_id: String,
    /// 1-based inclusive line range in the file.
    pub start_line: u32,
    pub end_line: u32,
    /// Byte range in the file, end exclusive.
    pub start_byte: u32,
    pub end_byte: u32,
    /// Text to store and embed. For BodyPart: signature line(s) + "\n    ...\n" + the part.
    pub text: String,
    /// Index (into `FileExtract::chunks`) of the enclosing symbol chunk (type → method, module → item).
    pub parent: Option<usize>,
}

/// An import statement of a file, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    /// The module/path imported, as written (`crate::graph`, `./util`, `os.path`, `fmt`, `"util.h"`).
    pub module: String,
    /// Names brought into scope by it (`HashMap`, `join`); empty when the whole module is imported.
    pub names: Vec<String>,
    pub line: u32,
}

/// A call site inside a chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// Index of the innermost symbol chunk containing the call.
    pub from: usize,
    /// The called name (`parse` for `self.parser.parse(x)` or `Parser::parse(x)`).
    pub callee: String,
    /// Qualifier as written, if any (`Parser`, `self.parser`, `os.path`).
    pub qualifier: Option<String>,
    pub line: u32,
}

/// Everything extracted from one file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileExtract {
    pub chunks: Vec<Chunk>,
    pub imports: Vec<Import>,
    pub calls: Vec<Call>,
    /// True when tree-sitter reported syntax errors (chunks are still produced, best effort).
    pub had_parse_errors: bool,
}

impl Language {
    /// Every language, in a fixed order.
    pub const ALL: [Language; 15] = [
        Language::Rust,
        Language::Python,
        Language::TypeScript,
        Language::Tsx,
        Language::JavaScript,
        Language::Go,
        Language::Java,
        Language::C,
        Language::Cpp,
        Language::Markdown,
        Language::Toml,
        Language::Yaml,
        Language::Json,
        Language::Shell,
        Language::Text,
    ];

    /// Detects the language of a file from its extension or file name. `None` for unknown
    /// extensions (the caller may still index such a file as [`Language::Text`] after a binary
    /// check).
    pub fn from_path(path: &Path) -> Option<Language> {
        let file_name = path.file_name()?.to_str()?;
        let lower = file_name.to_ascii_lowercase();
        match lower.as_str() {
            "makefile" | "gnumakefile" | "dockerfile" | "containerfile" | "jenkinsfile"
            | "vagrantfile" | "gemfile" | "rakefile" | "procfile" | "license" | "licence"
            | "copying" | "notice" | "authors" | "contributors" | "readme" | "changelog"
            | "changes" | "contributing" | "codeowners" | "todo" | "install" | "news"
            | ".gitignore" | ".gitattributes" | ".dockerignore" | ".editorconfig"
            | ".npmignore" | ".prettierrc" | ".eslintrc" | "cmakelists.txt" | "build"
            | "workspace" | "go.mod" | "go.work" => return Some(Language::Text),
            ".bashrc" | ".zshrc" | ".profile" | ".bash_profile" => return Some(Language::Shell),
            _ => {}
        }
        if lower.starts_with("dockerfile.") || lower.ends_with(".dockerfile") {
            return Some(Language::Text);
        }
        let ext = match lower.rfind('.') {
            Some(i) if i > 0 || !lower.contains('.') => &lower[i + 1..],
            _ => {
                // `README`, `LICENSE-MIT`, `.env`-like names without a real extension.
                if lower.starts_with("license")
                    || lower.starts_with("readme")
                    || lower.starts_with("changelog")
                    || lower.starts_with(".env")
                {
                    return Some(Language::Text);
                }
                return None;
            }
        };
        Some(match ext {
            "rs" => Language::Rust,
            "py" | "pyi" | "pyw" => Language::Python,
            "ts" | "mts" | "cts" => Language::TypeScript,
            "tsx" => Language::Tsx,
            "js" | "mjs" | "cjs" | "jsx" => Language::JavaScript,
            "go" => Language::Go,
            "java" => Language::Java,
            "c" | "h" => Language::C,
            "cc" | "cpp" | "cxx" | "c++" | "hpp" | "hh" | "hxx" | "h++" | "ipp" | "tpp" | "inl" => {
                Language::Cpp
            }
            "md" | "markdown" | "mdx" | "mkd" => Language::Markdown,
            "toml" => Language::Toml,
            "yaml" | "yml" => Language::Yaml,
            "json" | "jsonc" | "json5" => Language::Json,
            "sh" | "bash" | "zsh" | "ksh" => Language::Shell,
            "txt" | "text" | "rst" | "adoc" | "asciidoc" | "org" | "tex" | "cfg" | "ini"
            | "conf" | "config" | "properties" | "env" | "sql" | "html" | "htm" | "xhtml"
            | "css" | "scss" | "sass" | "less" | "xml" | "xsd" | "xsl" | "svg" | "gradle"
            | "cmake" | "mk" | "mak" | "proto" | "thrift" | "graphql" | "gql" | "tf" | "hcl"
            | "nix" | "bzl" | "bazel" | "star" | "rb" | "php" | "swift" | "kt" | "kts"
            | "scala" | "sc" | "cs" | "fs" | "fsx" | "lua" | "pl" | "pm" | "r" | "dart" | "ex"
            | "exs" | "erl" | "hrl" | "hs" | "ml" | "mli" | "clj" | "cljs" | "vue" | "svelte"
            | "zig" | "nim" | "jl" | "groovy" | "ps1" | "psm1" | "bat" | "cmd" | "vim" | "el"
            | "lisp" | "scm" | "rkt" | "v" | "sv" | "vhd" | "vhdl" | "m" | "mm" | "f90" | "cu"
            | "cuh" | "cl" | "glsl" | "hlsl" | "wgsl" | "metal" | "asm" | "s" | "cabal" | "sbt"
            | "pom" | "csproj" | "sln" | "editorconfig" | "gitignore" | "dockerignore" | "in"
            | "am" | "ac" | "patch" | "diff" | "log" | "csv" | "tsv" => Language::Text,
            _ => return None,
        })
    }

    /// Stable lower-case name (`rust`, `python`, `typescript`, `tsx`, …).
    pub fn name(&self) -> &'static str {
        match self {
            Language::Rust => "rust",
            Language::Python => "python",
            Language::TypeScript => "typescript",
            Language::Tsx => "tsx",
            Language::JavaScript => "javascript",
            Language::Go => "go",
            Language::Java => "java",
            Language::C => "c",
            Language::Cpp => "cpp",
            Language::Markdown => "markdown",
            Language::Toml => "toml",
            Language::Yaml => "yaml",
            Language::Json => "json",
            Language::Shell => "shell",
            Language::Text => "text",
        }
    }

    /// Inverse of [`Language::name`]; also accepts a few common aliases (`rs`, `py`, `ts`,
    /// `js`, `c++`, `md`, `sh`, …). Case-insensitive.
    pub fn from_name(s: &str) -> Option<Language> {
        let lower = s.trim().to_ascii_lowercase();
        if let Some(l) = Language::ALL.iter().find(|l| l.name() == lower) {
            return Some(*l);
        }
        Some(match lower.as_str() {
            "rs" => Language::Rust,
            "py" => Language::Python,
            "ts" => Language::TypeScript,
            "js" | "jsx" => Language::JavaScript,
            "golang" => Language::Go,
            "c++" | "cxx" | "cc" => Language::Cpp,
            "md" => Language::Markdown,
            "yml" => Language::Yaml,
            "sh" | "bash" => Language::Shell,
            "txt" => Language::Text,
            _ => return None,
        })
    }

    /// True for languages parsed with tree-sitter into symbols.
    pub fn is_code(&self) -> bool {
        matches!(
            self,
            Language::Rust
                | Language::Python
                | Language::TypeScript
                | Language::Tsx
                | Language::JavaScript
                | Language::Go
                | Language::Java
                | Language::C
                | Language::Cpp
        )
    }
}

impl ChunkKind {
    /// Every kind, in a fixed order.
    pub const ALL: [ChunkKind; 12] = [
        ChunkKind::Function,
        ChunkKind::Method,
        ChunkKind::Class,
        ChunkKind::Struct,
        ChunkKind::Enum,
        ChunkKind::Trait,
        ChunkKind::Interface,
        ChunkKind::Impl,
        ChunkKind::Module,
        ChunkKind::BodyPart,
        ChunkKind::TopLevel,
        ChunkKind::Window,
    ];

    /// Stable snake_case name (`function`, `body_part`, `top_level`, …).
    pub fn name(&self) -> &'static str {
        match self {
            ChunkKind::Function => "function",
            ChunkKind::Method => "method",
            ChunkKind::Class => "class",
            ChunkKind::Struct => "struct",
            ChunkKind::Enum => "enum",
            ChunkKind::Trait => "trait",
            ChunkKind::Interface => "interface",
            ChunkKind::Impl => "impl",
            ChunkKind::Module => "module",
            ChunkKind::BodyPart => "body_part",
            ChunkKind::TopLevel => "top_level",
            ChunkKind::Window => "window",
        }
    }

    /// Inverse of [`ChunkKind::name`].
    pub fn from_name(s: &str) -> Option<ChunkKind> {
        ChunkKind::ALL.iter().copied().find(|k| k.name() == s)
    }

    /// Functions and methods.
    pub fn is_callable(&self) -> bool {
        matches!(self, ChunkKind::Function | ChunkKind::Method)
    }

    /// Classes, structs, enums, traits, interfaces and impls (things that own methods).
    pub fn is_type(&self) -> bool {
        matches!(
            self,
            ChunkKind::Class
                | ChunkKind::Struct
                | ChunkKind::Enum
                | ChunkKind::Trait
                | ChunkKind::Interface
                | ChunkKind::Impl
        )
    }

    /// Kinds that are symbols (carry a symbol id): everything but body parts, top-level
    /// windows and plain windows.
    pub fn is_symbol(&self) -> bool {
        !matches!(
            self,
            ChunkKind::BodyPart | ChunkKind::TopLevel | ChunkKind::Window
        )
    }
}

/// Size limits for chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkOptions {
    /// A symbol longer than this many lines is split (functions) or reduced to its header and
    /// fields (types).
    pub max_chunk_lines: u32,
    /// Same, in bytes.
    pub max_chunk_bytes: usize,
    /// Lines per window for non-code files and top-level leftovers.
    pub window_lines: u32,
    /// Overlap between consecutive windows of non-code files.
    pub window_overlap: u32,
}

impl Default for ChunkOptions {
    fn default() -> Self {
        ChunkOptions {
            max_chunk_lines: 80,
            max_chunk_bytes: 3000,
            window_lines: 40,
            window_overlap: 5,
        }
    }
}

impl ChunkOptions {
    fn sane(&self) -> ChunkOptions {
        let max_chunk_lines = self.max_chunk_lines.max(4);
        let window_lines = self.window_lines.max(2);
        ChunkOptions {
            max_chunk_lines,
            max_chunk_bytes: self.max_chunk_bytes.max(128),
            window_lines,
            window_overlap: self.window_overlap.min(window_lines / 2),
        }
    }
}

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
            extract_code(lang, repo, rel_path, source, &opts)
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

/// The per-language part of the engine: which nodes are symbols, imports and calls.
pub(crate) trait Spec: Sync {
    /// What `node` is, when met among the items of a file, module or type body.
    fn classify<'t>(&self, node: Node<'t>, src: &str) -> Class<'t>;
    /// Comments, attributes and decorators that belong to the symbol right below them.
    fn is_leading(&self, node: Node, src: &str) -> bool;
    /// Appends the import(s) `node` stands for; returns true when `node` was one (its subtree is
    /// then not searched further for calls).
    fn import(&self, node: Node, src: &str, out: &mut Vec<Import>) -> bool;
    /// `(callee, qualifier)` when `node` is a call site.
    fn call(&self, node: Node, src: &str) -> Option<(String, Option<String>)>;
    /// Line-comment marker used in the `… ` context line of body parts.
    fn comment(&self) -> &'static str {
        "//"
    }
}

/// A symbol definition found by a [`Spec`].
pub(crate) struct Def<'t> {
    /// Function (turned into Method inside a type), Class, Struct, Enum, Trait, Interface, Impl
    /// or Module.
    pub kind: ChunkKind,
    pub name: String,
    /// The node whose start is the start of the signature (for body-part context).
    pub node: Node<'t>,
    /// Functions: the body block (its children are the statements to split at).
    /// Types/modules: the node whose children are members (searched for nested symbols).
    pub body: Option<Node<'t>>,
    /// Explicit owner path for out-of-line methods (Go receivers, C++ `ns::Foo::bar`).
    pub scope: Vec<String>,
}

impl<'t> Def<'t> {
    pub fn new(kind: ChunkKind, name: impl Into<String>, node: Node<'t>) -> Self {
        Def {
            kind,
            name: name.into(),
            node,
            body: None,
            scope: Vec::new(),
        }
    }
    pub fn body(mut self, body: Option<Node<'t>>) -> Self {
        self.body = body;
        self
    }
}

pub(crate) enum Class<'t> {
    /// A symbol.
    Def(Def<'t>),
    /// A node wrapping a definition (decorators, `export`, `template<…>`): the inner definition's
    /// chunk starts at the wrapper.
    Wrapper,
    /// A block whose children are items (preprocessor conditionals, `extern "C" {}`, grouped Go
    /// type declarations).
    Container,
    /// Anything else.
    Other,
}

fn grammar(lang: Language) -> Option<(tree_sitter::Language, &'static dyn Spec)> {
    Some(match lang {
        Language::Rust => (tree_sitter_rust::LANGUAGE.into(), &rust::RustSpec),
        Language::Python => (tree_sitter_python::LANGUAGE.into(), &python::PythonSpec),
        Language::TypeScript => (
            tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
            &js::JsSpec,
        ),
        Language::Tsx => (tree_sitter_typescript::LANGUAGE_TSX.into(), &js::JsSpec),
        Language::JavaScript => (tree_sitter_javascript::LANGUAGE.into(), &js::JsSpec),
        Language::Go => (tree_sitter_go::LANGUAGE.into(), &go::GoSpec),
        Language::Java => (tree_sitter_java::LANGUAGE.into(), &java::JavaSpec),
        Language::C => (tree_sitter_c::LANGUAGE.into(), &c::CSpec),
        Language::Cpp => (tree_sitter_cpp::LANGUAGE.into(), &c::CSpec),
        _ => return None,
    })
}

thread_local! {
    /// One parser per language per thread: creating a parser and loading its language for every
    /// file costs allocations and table set-up that a long walk would repeat thousands of times.
    static PARSERS: std::cell::RefCell<HashMap<Language, tree_sitter::Parser>> =
        std::cell::RefCell::new(HashMap::new());
}

fn parse(lang: Language, source: &str) -> Option<(tree_sitter::Tree, &'static dyn Spec)> {
    let (ts_lang, spec) = grammar(lang)?;
    PARSERS.with(|cell| {
        let mut parsers = cell.borrow_mut();
        let parser = match parsers.entry(lang) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let mut p = tree_sitter::Parser::new();
                p.set_language(&ts_lang).ok()?;
                v.insert(p)
            }
        };
        // A previous parse that was cut short leaves state behind; start clean.
        parser.reset();
        let tree = parser.parse(source, None)?;
        Some((tree, spec))
    })
}

/// Cheap check for C++-only syntax in a header.
fn looks_like_cpp(source: &str) -> bool {
    [
        "namespace ",
        "template <",
        "template<",
        "std::",
        "class ",
        "public:",
        "private:",
    ]
    .iter()
    .any(|m| source.contains(m))
}

fn extract_code(
    lang: Language,
    repo: &str,
    rel_path: &str,
    source: &str,
    opts: &ChunkOptions,
) -> Option<FileExtract> {
    let header = lang == Language::C && rel_path.ends_with(".h");
    // `.h` files are C by default; one with C++-only syntax is parsed as C++ straight away, and
    // a header that only parses as C++ is read as C++.
    let first = if header && looks_like_cpp(source) {
        Language::Cpp
    } else {
        lang
    };
    let (mut tree, mut spec) = parse(first, source)?;
    if header && first == Language::C && tree.root_node().has_error() {
        if let Some((t, s)) = parse(Language::Cpp, source) {
            if !t.root_node().has_error() {
                tree = t;
                spec = s;
            }
        }
    }
    let root = tree.root_node();
    let mut b = Builder {
        lang,
        spec,
        src: source,
        lines: LineIndex::new(source),
        opts,
        id_prefix: format!(
            "{} {} {}",
            lang.name(),
            if repo.is_empty() { "." } else { repo },
            rel_path
        ),
        chunks: Vec::new(),
        depth: Vec::new(),
        node_chunk: HashMap::new(),
        ids: HashMap::new(),
        covered: Vec::new(),
        pending_owner: Vec::new(),
    };
    let defs = collect_defs(spec, root, source, 0);
    for d in &defs {
        b.emit(d, None, "", false);
    }
    b.resolve_owners();
    b.leftovers();
    let (imports, calls) = b.walk(root);
    Some(b.finish(imports, calls, root.has_error()))
}

/// A definition with its range and nested definitions.
struct DefNode<'t> {
    def: Def<'t>,
    /// The outermost node of the definition (wrapper included).
    outer: Node<'t>,
    children: Vec<DefNode<'t>>,
}

const MAX_DEF_DEPTH: usize = 48;

fn collect_defs<'t>(
    spec: &dyn Spec,
    container: Node<'t>,
    src: &str,
    depth: usize,
) -> Vec<DefNode<'t>> {
    let mut out = Vec::new();
    if depth > MAX_DEF_DEPTH {
        return out;
    }
    let mut cursor = container.walk();
    let kids: Vec<Node<'t>> = container.named_children(&mut cursor).collect();
    for child in kids {
        match spec.classify(child, src) {
            Class::Def(def) => out.push(def_node(spec, def, child, src, depth)),
            Class::Wrapper => {
                if let Some(def) = find_wrapped(spec, child, src, 0) {
                    out.push(def_node(spec, def, child, src, depth));
                }
            }
            Class::Container => out.extend(collect_defs(spec, child, src, depth + 1)),
            Class::Other => {}
        }
    }
    out
}

fn find_wrapped<'t>(spec: &dyn Spec, node: Node<'t>, src: &str, depth: usize) -> Option<Def<'t>> {
    if depth > 4 {
        return None;
    }
    let mut cursor = node.walk();
    let kids: Vec<Node<'t>> = node.named_children(&mut cursor).collect();
    for child in kids {
        match spec.classify(child, src) {
            Class::Def(def) => return Some(def),
            Class::Wrapper => {
                if let Some(d) = find_wrapped(spec, child, src, depth + 1) {
                    return Some(d);
                }
            }
            _ => {}
        }
    }
    None
}

fn def_node<'t>(
    spec: &dyn Spec,
    def: Def<'t>,
    outer: Node<'t>,
    src: &str,
    depth: usize,
) -> DefNode<'t> {
    let children = match (def.kind.is_callable(), def.body) {
        (false, Some(body)) => collect_defs(spec, body, src, depth + 1),
        _ => Vec::new(),
    };
    DefNode {
        def,
        outer,
        children,
    }
}

/// Byte offsets of line starts.
pub(crate) struct LineIndex {
    starts: Vec<usize>,
    len: usize,
}

impl LineIndex {
    pub(crate) fn new(src: &str) -> Self {
        let mut starts = vec![0];
        for (i, b) in src.bytes().enumerate() {
            if b == b'\n' && i + 1 < src.len() {
                starts.push(i + 1);
            }
        }
        LineIndex {
            starts,
            len: src.len(),
        }
    }
    /// Number of lines.
    pub(crate) fn count(&self) -> usize {
        self.starts.len()
    }
    /// 0-based line of a byte offset.
    pub(crate) fn line0(&self, byte: usize) -> usize {
        self.starts
            .partition_point(|&s| s <= byte)
            .saturating_sub(1)
    }
    /// Start byte of a 0-based line.
    pub(crate) fn start(&self, line0: usize) -> usize {
        self.starts.get(line0).copied().unwrap_or(self.len)
    }
    /// End byte (exclusive, newline included) of a 0-based line.
    pub(crate) fn end(&self, line0: usize) -> usize {
        self.starts.get(line0 + 1).copied().unwrap_or(self.len)
    }
    /// 1-based inclusive line range of a non-empty byte range.
    pub(crate) fn range(&self, start: usize, end: usize) -> (u32, u32) {
        let a = self.line0(start);
        let b = self.line0(end.max(start + 1) - 1).max(a);
        (a as u32 + 1, b as u32 + 1)
    }
}

/// `end` moved back over trailing whitespace (never before `start`).
pub(crate) fn trim_end(src: &str, start: usize, end: usize) -> usize {
    let t = src[start..end].trim_end();
    start + t.len()
}

/// Largest char boundary `<= i`.
pub(crate) fn floor_boundary(s: &str, i: usize) -> usize {
    let mut i = i.min(s.len());
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

pub(crate) fn node_text<'a>(node: Node, src: &'a str) -> &'a str {
    src.get(node.byte_range()).unwrap_or("")
}

pub(crate) fn field_text<'a>(node: Node, field: &str, src: &'a str) -> Option<&'a str> {
    node.child_by_field_name(field).map(|n| node_text(n, src))
}

/// Text with all whitespace removed, cut to a sane length (for qualifiers and type names).
pub(crate) fn compact(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut pending_space = false;
    for c in s.chars() {
        if c.is_whitespace() {
            pending_space = true;
            continue;
        }
        if pending_space {
            let word = |ch: char| ch.is_alphanumeric() || ch == '_' || ch == '$';
            if out.chars().next_back().is_some_and(word) && word(c) {
                out.push(' ');
            }
            pending_space = false;
        }
        out.push(c);
    }
    if out.len() > 120 {
        let cut = floor_boundary(&out, 120);
        out.truncate(cut);
    }
    out
}

/// `Foo<T>` → `Foo`, `a::b::Foo<T>` → `Foo`, `*Foo` → `Foo`, `&'a mut Foo` → `Foo`.
pub(crate) fn base_type_name(s: &str) -> String {
    let mut depth = 0i32;
    let mut out = String::new();
    for c in s.chars() {
        match c {
            '<' | '[' | '(' => depth += 1,
            '>' | ']' | ')' => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    let out = out.replace("::", ".");
    let last = out.rsplit('.').next().unwrap_or("");
    let last = last
        .trim_start_matches(['&', '*'])
        .trim_start_matches("'static")
        .trim();
    let last = last
        .strip_prefix("mut ")
        .or_else(|| last.strip_prefix("dyn "))
        .unwrap_or(last)
        .trim();
    let last = last.rsplit(' ').next().unwrap_or(last);
    last.trim_matches(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$' || c == '~'))
        .to_string()
}

/// The chunk-building state for one code file.
struct Builder<'s> {
    lang: Language,
    spec: &'static dyn Spec,
    src: &'s str,
    lines: LineIndex,
    opts: &'s ChunkOptions,
    id_prefix: String,
    chunks: Vec<Chunk>,
    /// Nesting depth of each chunk (for sorting parents first).
    depth: Vec<u32>,
    /// Node id of a definition's outer node and def node → its symbol chunk.
    node_chunk: HashMap<usize, usize>,
    /// Symbol id (without dedup counter) → times used.
    ids: HashMap<String, u32>,
    /// Byte ranges of top-level symbol chunks (for leftovers).
    covered: Vec<(usize, usize)>,
    /// Out-of-line methods whose owner type may be in this file: (chunk, owner qualified).
    pending_owner: Vec<(usize, String)>,
}

struct Emitted {
    index: usize,
}

impl<'s> Builder<'s> {
    /// Start of a definition including the comments/attributes directly above it, moved back to
    /// the start of its line when only whitespace precedes it there.
    fn def_start(&self, outer: Node) -> usize {
        let src = self.src;
        let mut start = outer.start_byte();
        let mut start_row = outer.start_position().row;
        let mut prev = outer.prev_named_sibling();
        while let Some(p) = prev {
            if !self.spec.is_leading(p, src) {
                break;
            }
            let p_end_row = p.end_position().row;
            if p_end_row + 1 < start_row || p_end_row > start_row {
                break;
            }
            if !line_prefix_blank(src, &self.lines, p.start_byte()) {
                break;
            }
            start = p.start_byte();
            start_row = p.start_position().row;
            prev = p.prev_named_sibling();
        }
        if line_prefix_blank(src, &self.lines, start) {
            start = self.lines.start(self.lines.line0(start));
        }
        start
    }

    fn too_big(&self, start: usize, end: usize) -> bool {
        if end <= start {
            return false;
        }
        let (a, b) = self.lines.range(start, end);
        b - a + 1 > self.opts.max_chunk_lines || end - start > self.opts.max_chunk_bytes
    }

    fn symbol_id(&mut self, qualified: &str, kind: ChunkKind) -> String {
        let suffix = match kind {
            ChunkKind::Function | ChunkKind::Method => "().",
            ChunkKind::Module => "/",
            _ => "#",
        };
        let key = format!("{qualified}{suffix}");
        let n = self.ids.entry(key).or_insert(0);
        *n += 1;
        if *n == 1 {
            format!("{}/{}{}", self.id_prefix, qualified, suffix)
        } else {
            format!("{}/{}({}){}", self.id_prefix, qualified, n, suffix)
        }
    }

    fn push(&mut self, chunk: Chunk, depth: u32) -> usize {
        self.chunks.push(chunk);
        self.depth.push(depth);
        self.chunks.len() - 1
    }

    fn emit(
        &mut self,
        d: &DefNode,
        parent: Option<usize>,
        prefix: &str,
        parent_is_type: bool,
    ) -> Emitted {
        let def = &d.def;
        let mut kind = def.kind;
        if kind == ChunkKind::Function && (parent_is_type || !def.scope.is_empty()) {
            kind = ChunkKind::Method;
        }
        let name = def.name.clone();
        let mut owner = String::new();
        let qualified = if !def.scope.is_empty() {
            owner = join_path(prefix, &def.scope.join("/"));
            format!("{owner}#{name}")
        } else if prefix.is_empty() {
            name.clone()
        } else if parent_is_type && kind.is_callable() {
            format!("{prefix}#{name}")
        } else {
            format!("{prefix}/{name}")
        };
        let symbol_id = self.symbol_id(&qualified, kind);
        let start = self.def_start(d.outer);
        let end = d.outer.end_byte().max(start);
        let depth = parent.map(|p| self.depth[p] + 1).unwrap_or(0);
        if parent.is_none() {
            self.covered.push((start, end));
        }
        let (start_line, end_line) = self.lines.range(start, end);
        let chunk = Chunk {
            kind,
            name: name.clone(),
            qualified: qualified.clone(),
            symbol_id,
            start_line,
            end_line,
            start_byte: start as u32,
            end_byte: trim_end(self.src, start, end) as u32,
            text: String::new(),
            parent,
        };
        let index = self.push(chunk, depth);
        self.node_chunk.insert(d.outer.id(), index);
        self.node_chunk.insert(def.node.id(), index);
        if !owner.is_empty() {
            self.pending_owner.push((index, owner));
        }
        if kind.is_callable() {
            self.fill_function(index, d, start, end);
        } else {
            let is_type = kind.is_type();
            let mut child_ranges = Vec::new();
            for c in &d.children {
                let e = self.emit(c, Some(index), &qualified, is_type);
                let cs = self.chunks[e.index].start_byte as usize;
                let ce = d_end(c);
                child_ranges.push((cs, ce));
            }
            self.fill_container(index, d, start, end, &child_ranges);
        }
        Emitted { index }
    }

    /// Text of a function chunk; splits long bodies into body parts.
    fn fill_function(&mut self, index: usize, d: &DefNode, start: usize, end: usize) {
        let src = self.src;
        if !self.too_big(start, end) {
            let e = trim_end(src, start, end);
            self.chunks[index].text = src[start..e].to_string();
            return;
        }
        let signature = self.signature(&d.def, start);
        let sig_lines = signature.lines().count() as u32 + 1;
        // Statement groups: byte ranges starting at a line start.
        let mut units: Vec<(usize, usize)> = Vec::new();
        if let Some(body) = d.def.body {
            let mut stmts = named_kids(body);
            if stmts.len() == 1 && stmts[0].kind() == "statement_list" {
                stmts = named_kids(stmts[0]);
            }
            for s in stmts {
                let (ss, se) = (s.start_byte(), s.end_byte());
                if ss < start || se > end || se <= ss {
                    continue;
                }
                let ls = self.lines.start(self.lines.line0(ss));
                let prev_end = units.last().map(|u| u.1).unwrap_or(start);
                if ls >= prev_end && ls > start && line_prefix_blank(src, &self.lines, ss) {
                    units.push((ls, se));
                } else if let Some(last) = units.last_mut() {
                    last.1 = last.1.max(se);
                }
            }
        }
        if units.is_empty() {
            // No statements to split at (expression body, parse trouble): cut by lines after
            // the first line.
            let first_line_end = self.lines.end(self.lines.line0(start));
            if first_line_end < end {
                units.push((first_line_end, end));
            }
        }
        // Units bigger than the limits are cut into line pieces.
        let max_lines = self.opts.max_chunk_lines.saturating_sub(sig_lines).max(8);
        let max_bytes = self
            .opts
            .max_chunk_bytes
            .saturating_sub(signature.len() + 8)
            .max(256);
        let mut groups = Vec::new();
        for (us, ue) in units {
            if self.lines.range(us, ue).1 - self.lines.range(us, ue).0 < max_lines
                && ue - us <= max_bytes
            {
                groups.push((us, ue));
                continue;
            }
            for piece in line_pieces(src, &self.lines, us, ue, max_lines, max_bytes) {
                groups.push(piece);
            }
        }
        // Greedy packing: the head keeps the signature; each later part starts at a group.
        let mut parts: Vec<(usize, usize)> = Vec::new();
        let mut cur = start;
        let n = groups.len();
        for (i, &(gs, ge)) in groups.iter().enumerate() {
            let tentative_end = if i + 1 == n { end } else { ge };
            let fits = {
                let (a, b) = self.lines.range(cur, tentative_end.max(cur + 1));
                let lines = b - a + 1;
                let bytes = tentative_end.saturating_sub(cur);
                if parts.is_empty() {
                    lines <= self.opts.max_chunk_lines && bytes <= self.opts.max_chunk_bytes
                } else {
                    lines <= max_lines && bytes <= max_bytes
                }
            };
            if !fits && cur < gs {
                parts.push((cur, gs));
                cur = gs;
            }
        }
        parts.push((cur, end));
        // Head.
        let (hs, he) = parts[0];
        let he = trim_end(src, hs, he).max(hs);
        {
            let (a, b) = self.lines.range(hs, he.max(hs + 1));
            let c = &mut self.chunks[index];
            c.start_line = a;
            c.end_line = b;
            c.end_byte = he as u32;
            c.text = src[hs..he].to_string();
        }
        let depth = self.depth[index] + 1;
        let (name, qualified) = (
            self.chunks[index].name.clone(),
            self.chunks[index].qualified.clone(),
        );
        let marker = format!("    {} …", self.spec.comment());
        for &(ps, pe) in &parts[1..] {
            let pe = trim_end(src, ps, pe);
            if pe <= ps {
                continue;
            }
            let (a, b) = self.lines.range(ps, pe);
            let text = format!("{signature}\n{marker}\n{}", &src[ps..pe]);
            self.push(
                Chunk {
                    kind: ChunkKind::BodyPart,
                    name: name.clone(),
                    qualified: qualified.clone(),
                    symbol_id: String::new(),
                    start_line: a,
                    end_line: b,
                    start_byte: ps as u32,
                    end_byte: pe as u32,
                    text,
                    parent: Some(index),
                },
                depth,
            );
        }
    }

    /// Signature lines of a function: from the start of its definition node to the line where
    /// the body opens (Python: the line before the first statement).
    fn signature(&self, def: &Def, chunk_start: usize) -> String {
        let src = self.src;
        let node_start = def.node.start_byte().max(chunk_start);
        let s = self.lines.start(self.lines.line0(node_start));
        let mut e = match def.body {
            Some(body) => {
                let brow = self.lines.line0(body.start_byte());
                let srow = self.lines.line0(node_start);
                let btxt = node_text(body, src);
                if brow > srow && !(btxt.starts_with('{') || btxt.starts_with(':')) {
                    self.lines.end(brow - 1)
                } else {
                    self.lines.end(brow)
                }
            }
            None => self.lines.end(self.lines.line0(node_start)),
        };
        // Cap very long signatures.
        let (a, b) = self.lines.range(s, e.max(s + 1));
        if b - a + 1 > 8 {
            e = self.lines.end(a as usize - 1 + 7);
        }
        if e - s > 600 {
            e = floor_boundary(src, s + 600);
        }
        src[s..e.max(s)].trim_end().to_string()
    }

    /// Text of a type/module chunk: the whole thing when small, else its header and members
    /// without the nested symbols (which have their own chunks); members beyond the limits go
    /// to body parts.
    fn fill_container(
        &mut self,
        index: usize,
        d: &DefNode,
        start: usize,
        end: usize,
        children: &[(usize, usize)],
    ) {
        let src = self.src;
        if !self.too_big(start, end) {
            let e = trim_end(src, start, end);
            self.chunks[index].text = src[start..e].to_string();
            return;
        }
        let first = self.lines.line0(start);
        let last = self.lines.line0(end.max(start + 1) - 1);
        let mut skip = vec![false; last - first + 1];
        for &(cs, ce) in children {
            if ce <= cs {
                continue;
            }
            let a = self.lines.line0(cs);
            let b = self.lines.line0(ce - 1);
            let type_end = trim_end(src, start, end);
            for l in a.max(first)..=b.min(last) {
                // Keep the type's own first and last line (header and closing brace) unless
                // the nested symbol runs to the very end (Python).
                let keep = (l == first && cs > start) || (l == last && ce < type_end);
                if !keep {
                    skip[l - first] = true;
                }
            }
        }
        let mut kept: Vec<String> = Vec::new();
        let marker = self.spec.comment();
        let mut l = first;
        while l <= last {
            if skip[l - first] {
                let line = &src[self.lines.start(l)..self.lines.end(l)];
                let indent: String = line
                    .chars()
                    .take_while(|c| *c == ' ' || *c == '\t')
                    .collect();
                let m = format!("{indent}{marker} …");
                // Blank lines between two removed symbols collapse into one marker.
                while kept.last().is_some_and(|k| k.trim().is_empty()) {
                    kept.pop();
                }
                if kept.last().map(|k| k.trim()) != Some(m.trim()) {
                    kept.push(m);
                }
                while l <= last && skip[l - first] {
                    l += 1;
                }
                continue;
            }
            let ls = self.lines.start(l).max(start);
            let le = self.lines.end(l).min(end);
            if le > ls {
                kept.push(src[ls..le].trim_end_matches(['\n', '\r']).to_string());
            }
            l += 1;
        }
        // Drop blank lines next to the markers, then pack into the limits.
        let max_lines = self.opts.max_chunk_lines as usize;
        let max_bytes = self.opts.max_chunk_bytes;
        let mut pieces: Vec<Vec<String>> = vec![Vec::new()];
        let mut bytes = 0usize;
        for line in kept {
            let cur = pieces.last_mut().expect("non-empty");
            if !cur.is_empty() && (cur.len() + 1 > max_lines || bytes + line.len() + 1 > max_bytes)
            {
                pieces.push(Vec::new());
                bytes = 0;
            }
            bytes += line.len() + 1;
            pieces.last_mut().expect("non-empty").push(line);
        }
        let mut pieces = pieces.into_iter();
        let head = pieces.next().unwrap_or_default();
        self.chunks[index].text = head.join("\n");
        let header = self.signature(&Def::new(d.def.kind, "", d.def.node), start);
        let header = header.lines().next().unwrap_or("").to_string();
        let depth = self.depth[index] + 1;
        let (name, qualified) = (
            self.chunks[index].name.clone(),
            self.chunks[index].qualified.clone(),
        );
        let (cs, ce) = (self.chunks[index].start_byte, self.chunks[index].end_byte);
        let (sl, el) = (self.chunks[index].start_line, self.chunks[index].end_line);
        for p in pieces {
            if p.iter().all(|l| l.trim().is_empty()) {
                continue;
            }
            self.push(
                Chunk {
                    kind: ChunkKind::BodyPart,
                    name: name.clone(),
                    qualified: qualified.clone(),
                    symbol_id: String::new(),
                    start_line: sl,
                    end_line: el,
                    start_byte: cs,
                    end_byte: ce,
                    text: format!("{header}\n    {marker} …\n{}", p.join("\n")),
                    parent: Some(index),
                },
                depth,
            );
        }
    }

    /// Points out-of-line methods (Go receivers, C++ `Foo::bar`) at their type when it is
    /// defined in this file.
    fn resolve_owners(&mut self) {
        if self.pending_owner.is_empty() {
            return;
        }
        let mut types: HashMap<&str, usize> = HashMap::new();
        for (i, c) in self.chunks.iter().enumerate() {
            if c.kind.is_type() && c.kind != ChunkKind::Impl {
                types.entry(c.qualified.as_str()).or_insert(i);
            }
        }
        let mut set = Vec::new();
        for (i, owner) in &self.pending_owner {
            if let Some(&t) = types.get(owner.as_str()) {
                set.push((*i, t));
                continue;
            }
            // `Shape::f` defined outside `namespace geo`: match `geo/Shape` when unique.
            let tail = format!("/{owner}");
            let mut found = types.iter().filter(|(q, _)| q.ends_with(&tail));
            if let (Some((_, &t)), None) = (found.next(), found.next()) {
                set.push((*i, t));
            }
        }
        for (i, t) in set {
            // The type is a closer owner than an enclosing namespace/module (`namespace ns {
            // Foo Foo::bar() {} }`); body parts of the method keep pointing at the method.
            let replace = match self.chunks[i].parent {
                None => true,
                Some(p) => self.chunks[p].kind == ChunkKind::Module,
            };
            if replace {
                self.chunks[i].parent = Some(t);
            }
        }
    }

    /// Top-level leftovers: contiguous uncovered lines as TopLevel windows.
    fn leftovers(&mut self) {
        let n = self.lines.count();
        let mut covered = vec![false; n];
        for &(s, e) in &self.covered {
            if e <= s {
                continue;
            }
            let a = self.lines.line0(s);
            let b = self.lines.line0(e - 1);
            for c in covered.iter_mut().take(b + 1).skip(a) {
                *c = true;
            }
        }
        let mut l = 0;
        let mut new = Vec::new();
        while l < n {
            if covered[l] {
                l += 1;
                continue;
            }
            let run_start = l;
            while l < n && !covered[l] {
                l += 1;
            }
            new.extend(text::line_windows(
                self.src,
                &self.lines,
                run_start,
                l - 1,
                self.opts.window_lines as usize,
                0,
                self.opts.max_chunk_bytes,
                ChunkKind::TopLevel,
            ));
        }
        for c in new {
            self.push(c, 0);
        }
    }

    /// One pass over the tree for imports and calls.
    fn walk(&self, root: Node) -> (Vec<Import>, Vec<Call>) {
        let src = self.src;
        let mut imports = Vec::new();
        let mut calls = Vec::new();
        let mut cursor = root.walk();
        // Stack of the innermost symbol chunk per depth.
        let mut current: Vec<Option<usize>> = vec![None];
        loop {
            let node = cursor.node();
            let mut cur = *current.last().unwrap_or(&None);
            if let Some(&i) = self.node_chunk.get(&node.id()) {
                cur = Some(i);
            }
            let mut descend = true;
            if self.spec.import(node, src, &mut imports) {
                descend = false;
            } else if let Some(from) = cur {
                if let Some((callee, qualifier)) = self.spec.call(node, src) {
                    if !callee.is_empty() {
                        calls.push(Call {
                            from,
                            callee,
                            qualifier: qualifier.filter(|q| !q.is_empty()),
                            line: node.start_position().row as u32 + 1,
                        });
                    }
                }
            }
            if descend && cursor.goto_first_child() {
                current.push(cur);
                continue;
            }
            loop {
                if cursor.goto_next_sibling() {
                    break;
                }
                if !cursor.goto_parent() {
                    for imp in &mut imports {
                        imp.names.dedup();
                    }
                    return (imports, calls);
                }
                current.pop();
            }
        }
    }

    /// Sorts chunks (parents first) and remaps parent and call indices.
    fn finish(self, imports: Vec<Import>, mut calls: Vec<Call>, errors: bool) -> FileExtract {
        let Builder {
            chunks,
            depth,
            lang,
            ..
        } = self;
        let _ = lang;
        let mut order: Vec<usize> = (0..chunks.len()).collect();
        order.sort_by_key(|&i| {
            let c = &chunks[i];
            (
                c.start_byte,
                depth[i],
                std::cmp::Reverse(c.end_byte),
                c.kind == ChunkKind::BodyPart,
                i,
            )
        });
        let mut remap = vec![0usize; chunks.len()];
        for (new, &old) in order.iter().enumerate() {
            remap[old] = new;
        }
        let mut slots: Vec<Option<Chunk>> = chunks.into_iter().map(Some).collect();
        let mut out = Vec::with_capacity(slots.len());
        for &old in &order {
            if let Some(mut c) = slots[old].take() {
                c.parent = c.parent.map(|p| remap[p]);
                out.push(c);
            }
        }
        for call in &mut calls {
            call.from = remap[call.from];
        }
        FileExtract {
            chunks: out,
            imports,
            calls,
            had_parse_errors: errors,
        }
    }
}

fn d_end(d: &DefNode) -> usize {
    d.outer.end_byte()
}

fn join_path(prefix: &str, rest: &str) -> String {
    if prefix.is_empty() {
        rest.to_string()
    } else {
        format!("{prefix}/{rest}")
    }
}

pub(crate) fn named_kids(node: Node) -> Vec<Node> {
    let mut c = node.walk();
    node.named_children(&mut c).collect()
}

/// True when only spaces/tabs precede `byte` on its line.
fn line_prefix_blank(src: &str, lines: &LineIndex, byte: usize) -> bool {
    let ls = lines.start(lines.line0(byte));
    src.get(ls..byte)
        .map(|p| p.chars().all(|c| c == ' ' || c == '\t'))
        .unwrap_or(false)
}

/// Cuts `[start, end)` into pieces of at most `max_lines` lines / `max_bytes` bytes at line
/// starts (a single longer line stays whole).
fn line_pieces(
    src: &str,
    lines: &LineIndex,
    start: usize,
    end: usize,
    max_lines: u32,
    max_bytes: usize,
) -> Vec<(usize, usize)> {
    let _ = src;
    let mut out = Vec::new();
    let first = lines.line0(start);
    let last = lines.line0(end.max(start + 1) - 1);
    let mut ps = start;
    let mut count = 0u32;
    for l in first..=last {
        let ls = lines.start(l).max(start);
        let le = lines.end(l).min(end);
        if count > 0 && (count + 1 > max_lines || le - ps > max_bytes) {
            out.push((ps, ls));
            ps = ls;
            count = 0;
        }
        count += 1;
    }
    out.push((ps, end));
    out
}

#[cfg(test)]
mod tests;
