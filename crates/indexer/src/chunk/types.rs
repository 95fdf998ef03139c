//! The public data of chunking: [`Language`], [`ChunkKind`], what [`extract`](super::extract)
//! returns ([`FileExtract`] with its [`Chunk`]s, [`Import`]s and [`Call`]s) and [`ChunkOptions`].

use std::path::Path;

/// The strings of the graph facts that every file keeps until the build resolves the graph:
/// names of 24 bytes or less (nearly all callees, qualifiers and receivers) live inside the
/// value, not in a heap allocation of their own.
pub use compact_str::CompactString;

/// `v` as [`CompactString`]s.
pub(crate) fn compact_all(v: Vec<String>) -> Vec<CompactString> {
    v.into_iter().map(Into::into).collect()
}

/// `v`'s pairs as [`CompactString`]s.
pub(crate) fn compact_pairs(v: Vec<(String, String)>) -> Vec<(CompactString, CompactString)> {
    v.into_iter().map(|(a, b)| (a.into(), b.into())).collect()
}

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
    /// A symbol's header (`path ▸ owner ▸ signature ▸ first doc sentence`), embedded apart
    /// from its body; its parent is the symbol (see `chunk::header`).
    Header,
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
    pub name: CompactString,
    /// Qualified name inside the file (`Parser#parse`, `mod_a/Parser#parse`), empty if none.
    pub qualified: CompactString,
    /// Which SCIP-like symbol id the chunk has (`<lang> <repo> <path>/<Qualified#name>().`),
    /// [`SymbolTag::NONE`] for chunks that are not symbols; the id itself is
    /// [`FileExtract::symbol_id`], made when it is written (a build holds every chunk of the
    /// tree until its graph is resolved, and each id repeats the file's path).
    pub symbol: SymbolTag,
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

/// What a chunk's symbol id is made of besides the file's prefix and the chunk's qualified
/// name: the suffix by kind and, for the n-th symbol of one qualified name and suffix in a
/// file (n > 1), `(n)` before the suffix. Four bytes in place of the id's own allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SymbolTag(u32);

impl SymbolTag {
    /// No symbol id.
    pub const NONE: SymbolTag = SymbolTag(0);
    const SUFFIXES: [&'static str; 4] = ["", "().", "/", "#"];

    /// The tag of the `occurrence`-th (from 1) symbol of kind `kind` with one qualified name.
    pub(crate) fn new(kind: ChunkKind, occurrence: u32) -> SymbolTag {
        let suffix = match kind {
            ChunkKind::Function | ChunkKind::Method => 1,
            ChunkKind::Module => 2,
            _ => 3,
        };
        SymbolTag(occurrence.clamp(1, u32::MAX >> 2) << 2 | suffix)
    }

    /// The tag as stored (a build's facts cache); any `u32` is a tag.
    pub(crate) fn raw(self) -> u32 {
        self.0
    }

    /// [`SymbolTag::raw`]'s inverse.
    pub(crate) fn from_raw(raw: u32) -> SymbolTag {
        SymbolTag(raw)
    }

    /// Whether the chunk has a symbol id.
    pub fn is_some(self) -> bool {
        self.0 != 0
    }

    fn suffix(self) -> &'static str {
        Self::SUFFIXES[(self.0 & 3) as usize]
    }

    fn occurrence(self) -> u32 {
        self.0 >> 2
    }
}

impl Chunk {
    /// The chunk's symbol id in a file whose ids start with `id_prefix`
    /// ([`FileExtract::id_prefix`]), empty when it has none ([`Chunk::symbol`]).
    pub fn symbol_id(&self, id_prefix: &str) -> String {
        let mut s = String::with_capacity(self.symbol_id_len(id_prefix));
        if self.symbol.is_some() {
            use std::fmt::Write;
            s.push_str(id_prefix);
            s.push('/');
            s.push_str(&self.qualified);
            if self.symbol.occurrence() > 1 {
                let _ = write!(s, "({})", self.symbol.occurrence());
            }
            s.push_str(self.symbol.suffix());
        }
        s
    }

    /// The length in bytes of [`Chunk::symbol_id`], without making it.
    pub fn symbol_id_len(&self, id_prefix: &str) -> usize {
        if !self.symbol.is_some() {
            return 0;
        }
        let n = self.symbol.occurrence();
        let dup = if n > 1 { n.ilog10() as usize + 3 } else { 0 };
        id_prefix.len() + 1 + self.qualified.len() + dup + self.symbol.suffix().len()
    }
}

/// An import statement of a file, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Import {
    /// The module/path imported, as written (`crate::graph`, `./util`, `os.path`, `fmt`, `"util.h"`).
    pub module: CompactString,
    /// Names brought into scope by it (`HashMap`, `join`), as defined in the imported module;
    /// empty when the whole module is imported.
    pub names: Vec<CompactString>,
    pub line: u32,
    /// Local names that differ from what they stand for: `(local, original)`, where `original`
    /// is one of `names`, or [`MODULE_ALIAS`] when `local` names the imported module itself
    /// (`import a.b as m`, `import * as m from`, Go's package name, `import os.path`).
    pub aliases: Vec<(CompactString, CompactString)>,
}

/// The stated "type" of a local bound to a closure or lambda: calls of it are not calls of a
/// symbol of the same name.
pub(crate) const LOCAL_FUNCTION: &str = "()";

/// Prefix of a loop variable's stated "type" as a spec reports it: the item type of the
/// collection named after it (`for h in self.handlers` → `[]self.handlers`), which the builder
/// reads from the collection's own binding (see [`ITEM_SUFFIX`]) and never stores as such.
pub(crate) const ITEM_OF: &str = "[]";

/// Suffix of the binding that holds the item type of a collection whose type is stated
/// (`handlers: list[Handler]` also binds `handlers[]` to `Handler`); no identifier ends so.
pub(crate) const ITEM_SUFFIX: &str = "[]";

/// The stated "type" that unbinds a name: a Go type switch's variable in a case of several
/// types, or the default case, has none of the types another case stated.
pub(crate) const UNBOUND: &str = "";

/// Prefix of a stated "type" that is the return type of the named function
/// (`x = make_parser()` → `@make_parser`), looked up when calls are resolved.
pub const RETURNED_BY: &str = "@";

/// Prefix of a stated "type" that is a callback parameter's, stated by the function the
/// callback is passed to: `%operate/0/1` is parameter 1 of the callback passed as argument 0
/// of `operate`, `%new Observable/0/0` the same for a constructor.
pub const CALLBACK_PARAM: &str = "%";

/// The `original` of an [`Import::aliases`] entry that binds the whole module.
pub const MODULE_ALIAS: &str = "*";

/// A call site inside a chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// Index of the innermost symbol chunk containing the call.
    pub from: usize,
    /// The called name (`parse` for `self.parser.parse(x)` or `Parser::parse(x)`).
    pub callee: CompactString,
    /// Qualifier as written, if any (`Parser`, `self.parser`, `os.path`).
    pub qualifier: Option<CompactString>,
    /// The type of the qualifier when the code states it: a parameter or local annotated with a
    /// type, a local or `self.x` assigned a constructor (`Foo()`, `Foo::new()`, `new Foo()`,
    /// `Foo { .. }`, `&Foo{}`), a Go method receiver. Simple type name (`Parser`).
    pub receiver: Option<CompactString>,
    pub line: u32,
}

/// Everything extracted from one file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileExtract {
    pub chunks: Vec<Chunk>,
    pub imports: Vec<Import>,
    pub calls: Vec<Call>,
    /// Module-level names whose type the file states (`_default_decoder = JSONDecoder()`,
    /// `export const onlineManager = new OnlineManager()`), by name: what a call on such a
    /// name imported into another file resolves through. Same form as [`Call::receiver`]
    /// (a type name, or [`RETURNED_BY`] and a function name).
    pub module_bindings: Vec<(CompactString, CompactString)>,
    /// Fields whose type the file states, per type: (type name, field, type), sorted
    /// (`self._loop = Loop()` in `class Base` → `("Base", "_loop", "Loop")`): what a
    /// subclass's `self._loop.m()` resolves through. Same forms as `module_bindings`.
    pub member_bindings: Vec<(CompactString, CompactString, CompactString)>,
    /// True when tree-sitter reported syntax errors (chunks are still produced, best effort).
    pub had_parse_errors: bool,
    /// `<lang> <repo> <path>`: what every symbol id of the file starts with.
    pub id_prefix: String,
}

impl FileExtract {
    /// The symbol id of chunk `c` of this file, empty when it has none
    /// ([`Chunk::symbol`]).
    pub fn symbol_id(&self, c: &Chunk) -> String {
        c.symbol_id(&self.id_prefix)
    }

    /// The stated type of the module-level name `name` ([`FileExtract::module_bindings`]).
    pub fn module_binding(&self, name: &str) -> Option<&str> {
        let i = self
            .module_bindings
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()?;
        Some(self.module_bindings[i].1.as_str())
    }

    /// The stated type of field `field` of the type `ty` declared in this file
    /// ([`FileExtract::member_bindings`]).
    pub fn member_binding(&self, ty: &str, field: &str) -> Option<&str> {
        let i = self
            .member_bindings
            .binary_search_by(|(t, f, _)| (t.as_str(), f.as_str()).cmp(&(ty, field)))
            .ok()?;
        Some(self.member_bindings[i].2.as_str())
    }
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
    pub const ALL: [ChunkKind; 13] = [
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
        ChunkKind::Header,
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
            ChunkKind::Header => format::records::HEADER_KIND,
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

    /// Kinds that are symbols (carry a symbol id): everything but body parts, headers,
    /// top-level windows and plain windows.
    pub fn is_symbol(&self) -> bool {
        !matches!(
            self,
            ChunkKind::BodyPart | ChunkKind::Header | ChunkKind::TopLevel | ChunkKind::Window
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
    /// Emit a header chunk per symbol longer than `chunk::header::HEADER_MIN_LINES` lines.
    pub headers: bool,
}

impl Default for ChunkOptions {
    fn default() -> Self {
        ChunkOptions {
            max_chunk_lines: 80,
            max_chunk_bytes: 3000,
            window_lines: 40,
            window_overlap: 5,
            headers: true,
        }
    }
}

impl ChunkOptions {
    pub(super) fn sane(&self) -> ChunkOptions {
        let max_chunk_lines = self.max_chunk_lines.max(4);
        let window_lines = self.window_lines.max(2);
        ChunkOptions {
            max_chunk_lines,
            max_chunk_bytes: self.max_chunk_bytes.max(128),
            window_lines,
            window_overlap: self.window_overlap.min(window_lines / 2),
            headers: self.headers,
        }
    }
}
