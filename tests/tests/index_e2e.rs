//! End-to-end tests of the indexer and the query side with the real embedding model: the
//! polyglot fixture repository (plus bad inputs generated at runtime) is built into an index
//! with the library API, reopened with `format::Index::open`, searched with BM25, vectors and
//! `queryd::search`, rebuilt incrementally, corrupted and verified.
//!
//! The model must be present (`scripts/fetch-model.sh`); a missing model fails these tests.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cix_tests::{
    closing_line, copy_dir, embed_one, encoder, fixture, line_of, with_leading_comments,
};
use code::{Mode, SearchOptions};
use format::graph::Direction;
use format::records::{EdgeKind, EDGE_RESOLVED};
use format::Index;
use indexer::build::{build, BuildOptions, BuildReport};
use indexer::progress::Progress;
use indexer::IndexerError;
use tempfile::TempDir;

/// Repository name of every fixture copy (the directory name), part of each symbol id.
const REPO: &str = "polyglot";

/// Every language of the fixture, by the name the index records.
const LANGUAGES: [&str; 11] = [
    "rust",
    "python",
    "typescript",
    "tsx",
    "javascript",
    "go",
    "java",
    "c",
    "cpp",
    "markdown",
    "toml",
];

/// What `make_repo` put next to the fixture files.
struct BadInputs {
    /// The chmod-000 file could still be read (running as root): it is indexed like any file.
    unreadable_is_readable: bool,
    symlink_loop: bool,
}

/// Copies the fixture to `parent/polyglot` and adds the bad inputs that git could not keep
/// intact: invalid UTF-8, a binary file with a code extension, a Rust file with syntax errors,
/// an unknown extension, a symlink loop and an unreadable file.
fn make_repo(parent: &Path) -> (PathBuf, BadInputs) {
    let repo = parent.join(REPO);
    copy_dir(&fixture(REPO), &repo);
    write(
        &repo.join("pkg/latin1.py"),
        b"GREETING = '\xe9t\xe9 caf\xe9'\n",
    );
    write(
        &repo.join("native/blob.c"),
        b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00int main(void) { return 0; }\n",
    );
    write(
        &repo.join("src/broken.rs"),
        b"/// Half-written code that does not parse.\npub fn half_written(x: u32 -> u32 {\n    let y = x +;\n    y\n}\n\npub fn still_fine() -> u8 {\n    7\n}\n",
    );
    write(
        &repo.join("notes.xyz"),
        b"some notes in an unknown format\n",
    );
    let symlink_loop = make_symlink_loop(&repo);
    let unreadable_is_readable = make_unreadable(&repo.join("pkg/secret.py"));
    (
        repo,
        BadInputs {
            unreadable_is_readable,
            symlink_loop,
        },
    )
}

fn write(p: &Path, bytes: &[u8]) {
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(p, bytes).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
}

#[cfg(unix)]
fn make_symlink_loop(repo: &Path) -> bool {
    std::os::unix::fs::symlink("..", repo.join("web/loop")).expect("create symlink loop");
    true
}

#[cfg(not(unix))]
fn make_symlink_loop(_repo: &Path) -> bool {
    false
}

/// Writes a Python file and takes away every permission. Returns whether it can still be read
/// (true when running as root, which reads anything).
#[cfg(unix)]
fn make_unreadable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    write(p, b"def secret():\n    return 42\n");
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o000)).unwrap();
    std::fs::read(p).is_ok()
}

#[cfg(not(unix))]
fn make_unreadable(p: &Path) -> bool {
    write(p, b"def secret():\n    return 42\n");
    true
}

fn opts(repo: &Path, out: &Path) -> BuildOptions {
    BuildOptions::new(vec![repo.to_path_buf()], out.to_path_buf())
}

fn run_build(repo: &Path, out: &Path) -> BuildReport {
    build(&opts(repo, out), encoder(), &Progress::silent()).unwrap_or_else(|e| {
        panic!(
            "build of {} into {} failed: {e}",
            repo.display(),
            out.display()
        )
    })
}

/// The fixture with bad inputs, built once per test binary and shared by the read-only tests.
struct Shared {
    tmp: TempDir,
    repo: PathBuf,
    out: PathBuf,
    bad: BadInputs,
    report: BuildReport,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        let (repo, bad) = make_repo(&tmp.path().join("src"));
        let out = tmp.path().join("index");
        let report = run_build(&repo, &out);
        Shared {
            tmp,
            repo,
            out,
            bad,
            report,
        }
    })
}

fn fixture_text(rel: &str) -> String {
    std::fs::read_to_string(fixture(REPO).join(rel)).unwrap()
}

fn sym(lang: &str, path: &str, qualified: &str, suffix: &str) -> String {
    format!("{lang} {REPO} {path}/{qualified}{suffix}")
}

/// (segment, chunk) of the live chunk with this symbol id; panics when absent or ambiguous.
fn find_symbol(ix: &Index, symbol_id: &str) -> (usize, u32) {
    let mut found = Vec::new();
    for (si, ls) in ix.segments.iter().enumerate() {
        for (ci, c) in ls.segment.table().chunks.iter().enumerate() {
            if c.symbol_id.as_str() == symbol_id && !ls.tombstones.contains(ci as u32) {
                found.push((si, ci as u32));
            }
        }
    }
    assert_eq!(
        found.len(),
        1,
        "expected one live chunk with symbol id {symbol_id:?}, found {found:?}; symbols: {:?}",
        all_symbols(ix)
    );
    found[0]
}

fn all_symbols(ix: &Index) -> Vec<String> {
    ix.segments
        .iter()
        .flat_map(|ls| ls.segment.table().chunks.iter())
        .filter(|c| !c.symbol_id.is_empty())
        .map(|c| c.symbol_id.to_string())
        .collect()
}

/// Graph node of a file of segment `si`.
fn file_node(ix: &Index, si: usize, path: &str) -> u32 {
    let t = ix.segments[si].segment.table();
    let fi = t
        .files
        .iter()
        .position(|f| f.path.as_str() == path)
        .unwrap_or_else(|| panic!("{path} is not in segment {si}"));
    t.chunks.len() as u32 + fi as u32
}

fn edge(ix: &Index, si: usize, src: u32, dst: u32, kind: EdgeKind) -> Option<u8> {
    let g = ix.segments[si].segment.graph();
    let out = g
        .neighbors(src, kind, Direction::Out)
        .find(|(n, _)| *n == dst)
        .map(|(_, f)| f);
    let back = g
        .neighbors(dst, kind, Direction::In)
        .find(|(n, _)| *n == src)
        .map(|(_, f)| f);
    assert_eq!(out, back, "forward and reverse {kind:?} adjacency disagree");
    out
}

fn chunks_of_file(ix: &Index, path: &str) -> Vec<(usize, u32)> {
    let mut out = Vec::new();
    for (si, ls) in ix.segments.iter().enumerate() {
        let t = ls.segment.table();
        for (ci, c) in t.chunks.iter().enumerate() {
            if t.files[c.file.to_native() as usize].path.as_str() == path
                && !ls.tombstones.contains(ci as u32)
            {
                out.push((si, ci as u32));
            }
        }
    }
    out
}

fn open(out: &Path) -> Index {
    Index::open(out).unwrap_or_else(|e| panic!("open {}: {e}", out.display()))
}

fn flip_byte(p: &Path, offset: usize) {
    let mut b = std::fs::read(p).unwrap();
    assert!(
        offset < b.len(),
        "{} has only {} bytes",
        p.display(),
        b.len()
    );
    b[offset] ^= 0x5a;
    std::fs::write(p, b).unwrap();
}

fn segment_file(out: &Path, name: &str) -> PathBuf {
    let ix = open(out);
    assert_eq!(ix.segments.len(), 1, "expected a single-segment index");
    ix.segments[0].segment.dir().join(name)
}

// ---------------------------------------------------------------------------------------------

#[test]
fn build_report_covers_every_language_and_every_bad_input() {
    let s = shared();
    let r = &s.report;
    let insp = indexer::inspect::inspect(&s.out).unwrap();
    for lang in LANGUAGES {
        assert!(
            insp.chunks_by_language.get(lang).copied().unwrap_or(0) > 0,
            "no {lang} chunks: {:?}",
            insp.chunks_by_language
        );
    }
    let skipped = |k: &str| r.skipped.get(k).copied().unwrap_or(0);
    assert_eq!(skipped("binary"), 1, "skipped: {:?}", r.skipped);
    assert_eq!(skipped("invalid UTF-8"), 1, "skipped: {:?}", r.skipped);
    assert_eq!(skipped("unsupported type"), 1, "skipped: {:?}", r.skipped);
    assert!(
        r.warnings.iter().any(|w| w.contains("latin1.py")),
        "warnings: {:?}",
        r.warnings
    );
    if s.bad.unreadable_is_readable {
        assert_eq!(skipped("unreadable"), 0, "skipped: {:?}", r.skipped);
    } else {
        assert_eq!(skipped("unreadable"), 1, "skipped: {:?}", r.skipped);
        assert!(
            r.errors.iter().any(|e| e.contains("secret.py")),
            "errors: {:?}",
            r.errors
        );
    }
    if s.bad.symlink_loop {
        assert!(
            r.errors.iter().any(|e| e.contains("loop")),
            "the symlink loop is not reported: {:?}",
            r.errors
        );
    }
    assert!(r.parse_error_files >= 1, "report: {r:?}");

    // 15 fixture files + broken.rs (+ secret.py when readable) are indexed.
    let expected_files = 16 + usize::from(s.bad.unreadable_is_readable);
    assert_eq!(r.files_indexed, expected_files, "report: {r:?}");
    assert_eq!(r.files_changed, expected_files);
    assert_eq!(r.files_unchanged, 0);
    assert_eq!(r.files_deleted, 0);
    assert_eq!(r.chunks_written, r.chunks_embedded + r.chunks_reused);
    assert!(r.chunks_embedded > 0 && r.tokens_embedded > 0);
    assert_eq!(r.chunks_tombstoned, 0);
    assert_eq!(r.generation, 1);
    assert!(r.segment_id.is_some());
    assert_eq!(r.live_chunks, r.chunks_written as u64);
    assert_eq!(insp.live_chunks, r.live_chunks);
    assert_eq!(insp.live_files, expected_files as u64);
    assert_eq!(insp.model_id, encoder().model_id());
    assert_eq!(insp.dim as usize, encoder().dim());

    // The good files are all there; the bad ones are not.
    let ix = open(&s.out);
    let paths: HashSet<String> = ix
        .segments
        .iter()
        .flat_map(|ls| ls.segment.table().files.iter().map(|f| f.path.to_string()))
        .collect();
    for p in [
        "src/lib.rs",
        "src/util.rs",
        "src/broken.rs",
        "pkg/__init__.py",
        "pkg/geometry.py",
        "pkg/main.py",
        "web/api.ts",
        "web/app.tsx",
        "web/util.js",
        "server/server.go",
        "java/Inventory.java",
        "native/hash.c",
        "native/hash.h",
        "native/matrix.cpp",
        "README.md",
        "config.toml",
    ] {
        assert!(paths.contains(p), "{p} missing from {paths:?}");
    }
    for p in ["pkg/latin1.py", "native/blob.c", "notes.xyz"] {
        assert!(!paths.contains(p), "{p} should have been skipped");
    }
    assert!(
        !paths.iter().any(|p| p.contains("loop/")),
        "files were indexed through the symlink loop: {paths:?}"
    );
    // The file with syntax errors still yields its well-formed function.
    find_symbol(&ix, &sym("rust", "src/broken.rs", "still_fine", "()."));
}

#[test]
fn chunk_boundaries_symbol_ids_kinds_and_parents() {
    let s = shared();
    let ix = open(&s.out);
    let lib = fixture_text("src/lib.rs");
    let geo = fixture_text("pkg/geometry.py");
    let go = fixture_text("server/server.go");
    let java = fixture_text("java/Inventory.java");
    let cpp = fixture_text("native/matrix.cpp");
    let ts = fixture_text("web/api.ts");

    struct Expect {
        id: String,
        kind: &'static str,
        name: &'static str,
        start: u32,
        end: u32,
        parent: Option<String>,
    }
    let rust_comments = ["///", "//"];
    let lev = line_of(&lib, "pub fn levenshtein_distance(");
    let ins = line_of(&lib, "pub fn insert(");
    let imp = line_of(&lib, "impl Dictionary {");
    let area = line_of(&geo, "def area(self):");
    let circle = line_of(&geo, "class Circle:");
    let serve = line_of(&go, "func (s *Server) ServeHTTP(");
    let gstruct = line_of(&go, "type Server struct {");
    let remove = line_of(&java, "public boolean removeItem(");
    let inv = line_of(&java, "public class Inventory {");
    let matrix = line_of(&cpp, "class Matrix {");
    let fetch = line_of(&ts, "export async function fetchPendingTodos(");
    let expects = vec![
        Expect {
            id: sym("rust", "src/lib.rs", "levenshtein_distance", "()."),
            kind: "function",
            name: "levenshtein_distance",
            start: with_leading_comments(&lib, lev, &rust_comments),
            end: closing_line(&lib, lev, "}"),
            parent: None,
        },
        Expect {
            id: sym("rust", "src/lib.rs", "Dictionary#insert", "()."),
            kind: "method",
            name: "insert",
            start: with_leading_comments(&lib, ins, &rust_comments),
            end: closing_line(&lib, ins, "    }"),
            parent: Some(rust_impl_id()),
        },
        Expect {
            id: rust_impl_id(),
            kind: "impl",
            name: "Dictionary",
            start: imp,
            end: closing_line(&lib, imp, "}"),
            parent: None,
        },
        Expect {
            id: sym("python", "pkg/geometry.py", "Circle#area", "()."),
            kind: "method",
            name: "area",
            start: area,
            end: line_of(&geo, "return math.pi * self.radius ** 2"),
            parent: Some(sym("python", "pkg/geometry.py", "Circle", "#")),
        },
        Expect {
            id: sym("python", "pkg/geometry.py", "Circle", "#"),
            kind: "class",
            name: "Circle",
            start: circle,
            end: line_of(&geo, "return 2 * math.pi * self.radius"),
            parent: None,
        },
        Expect {
            id: sym("go", "server/server.go", "Server#ServeHTTP", "()."),
            kind: "method",
            name: "ServeHTTP",
            start: with_leading_comments(&go, serve, &["//"]),
            end: closing_line(&go, serve, "}"),
            parent: Some(sym("go", "server/server.go", "Server", "#")),
        },
        Expect {
            id: sym("go", "server/server.go", "Server", "#"),
            kind: "struct",
            name: "Server",
            start: with_leading_comments(&go, gstruct, &["//"]),
            end: closing_line(&go, gstruct, "}"),
            parent: None,
        },
        Expect {
            id: sym("java", "java/Inventory.java", "Inventory#removeItem", "()."),
            kind: "method",
            name: "removeItem",
            start: with_leading_comments(&java, remove, &["/**"]),
            end: closing_line(&java, remove, "    }"),
            parent: Some(sym("java", "java/Inventory.java", "Inventory", "#")),
        },
        Expect {
            id: sym("java", "java/Inventory.java", "Inventory", "#"),
            kind: "class",
            name: "Inventory",
            start: with_leading_comments(&java, inv, &["/**"]),
            end: closing_line(&java, inv, "}"),
            parent: None,
        },
        Expect {
            id: sym("cpp", "native/matrix.cpp", "linalg/Matrix", "#"),
            kind: "class",
            name: "Matrix",
            start: matrix,
            end: closing_line(&cpp, matrix, "};"),
            parent: Some(sym("cpp", "native/matrix.cpp", "linalg", "/")),
        },
        Expect {
            id: sym("typescript", "web/api.ts", "fetchPendingTodos", "()."),
            kind: "function",
            name: "fetchPendingTodos",
            start: with_leading_comments(&ts, fetch, &["/**"]),
            end: closing_line(&ts, fetch, "}"),
            parent: None,
        },
    ];
    for e in &expects {
        let (si, ci) = find_symbol(&ix, &e.id);
        let t = ix.segments[si].segment.table();
        let c = &t.chunks[ci as usize];
        let text = ix.segments[si].segment.chunk_text(ci).unwrap();
        let what = format!(
            "{} (chunk {ci}: {}-{}, kind {}, text {text:?})",
            e.id, c.start_line, c.end_line, c.kind
        );
        assert_eq!(c.kind.as_str(), e.kind, "kind of {what}");
        assert_eq!(c.name.as_str(), e.name, "name of {what}");
        assert_eq!(c.start_line.to_native(), e.start, "start line of {what}");
        assert_eq!(c.end_line.to_native(), e.end, "end line of {what}");
        let file = &t.files[c.file.to_native() as usize];
        let src = fixture_text(file.path.as_str());
        // The stored text is exactly the source between the recorded byte offsets.
        let (sb, eb) = (
            c.start_byte.to_native() as usize,
            c.end_byte.to_native() as usize,
        );
        assert_eq!(&src[sb..eb], text, "text of {what}");
        let lines: Vec<&str> = src.lines().collect();
        let expected_text = lines[e.start as usize - 1..e.end as usize].join("\n");
        // A C++ class chunk is the class specifier: the `;` of its declaration stays outside.
        let expected_text = match expected_text.strip_suffix("};") {
            Some(head) if e.kind == "class" && e.id.starts_with("cpp ") => format!("{head}}}"),
            _ => expected_text,
        };
        assert_eq!(text, expected_text, "text of {what}");
        let parent = c.parent.to_native();
        match &e.parent {
            None => assert_eq!(parent, format::records::NO_PARENT, "parent of {what}"),
            Some(pid) => {
                assert_ne!(parent, format::records::NO_PARENT, "parent of {what}");
                assert_eq!(
                    t.chunks[parent as usize].symbol_id.as_str(),
                    pid,
                    "parent of {what}"
                );
            }
        }
        // The vector stored for the chunk is the model's embedding of its embed text.
        let et = indexer::build::embed_text(file.path.as_str(), &c.kind, &c.qualified, text);
        assert_eq!(
            c.content_hash,
            *blake3::hash(et.as_bytes()).as_bytes(),
            "content hash of {what} is not the hash of its embed text"
        );
    }
    // The doc comment is part of the chunk, so it is what semantic search sees.
    let (si, ci) = find_symbol(
        &ix,
        &sym("rust", "src/lib.rs", "levenshtein_distance", "()."),
    );
    assert!(ix.segments[si]
        .segment
        .chunk_text(ci)
        .unwrap()
        .starts_with("/// Computes the edit distance between two strings"));
}

/// An out-of-line C++ method defined inside its namespace belongs to its class (like one
/// defined outside the namespace, or a Go method with a receiver): its parent is the class
/// and the class CONTAINS it.
#[test]
fn cpp_out_of_line_method_in_namespace_belongs_to_its_class() {
    let s = shared();
    let ix = open(&s.out);
    let cpp = fixture_text("native/matrix.cpp");
    let mul = line_of(&cpp, "Matrix Matrix::multiply(const Matrix &other) const {");
    let id = sym("cpp", "native/matrix.cpp", "linalg/Matrix#multiply", "().");
    let class_id = sym("cpp", "native/matrix.cpp", "linalg/Matrix", "#");
    let (si, ci) = find_symbol(&ix, &id);
    let (_, class) = find_symbol(&ix, &class_id);
    let c = &ix.segments[si].segment.table().chunks[ci as usize];
    assert_eq!(c.kind.as_str(), "method");
    assert_eq!(
        c.start_line.to_native(),
        with_leading_comments(&cpp, mul, &["//"])
    );
    assert_eq!(c.end_line.to_native(), closing_line(&cpp, mul, "}"));
    let parent = c.parent.to_native();
    let parent_id = ix.segments[si]
        .segment
        .table()
        .chunks
        .get(parent as usize)
        .map(|p| p.symbol_id.to_string());
    assert_eq!(
        parent_id.as_deref(),
        Some(class_id.as_str()),
        "parent of the out-of-line method Matrix::multiply"
    );
    assert!(
        edge(&ix, si, class, ci, EdgeKind::Contains).is_some(),
        "no CONTAINS edge Matrix -> Matrix::multiply"
    );
}

/// `HashMap::new()` inside `Dictionary::new` calls the `new` of a type the file does not
/// define: it must not resolve to `Dictionary::new` itself.
#[test]
fn type_qualified_call_does_not_resolve_to_an_unrelated_method() {
    let s = shared();
    let ix = open(&s.out);
    let (si, new) = find_symbol(&ix, &sym("rust", "src/lib.rs", "Dictionary#new", "()."));
    let callees: Vec<String> = ix.segments[si]
        .segment
        .graph()
        .neighbors(new, EdgeKind::Calls, Direction::Out)
        .map(|(n, _)| {
            ix.segments[si].segment.table().chunks[n as usize]
                .symbol_id
                .to_string()
        })
        .collect();
    assert!(
        callees.is_empty(),
        "Dictionary::new only calls HashMap::new, yet has CALLS edges to {callees:?}"
    );
}

fn rust_impl_id() -> String {
    sym("rust", "src/lib.rs", "Dictionary(2)", "#")
}

#[test]
fn graph_edges_calls_contains_imports() {
    let s = shared();
    let ix = open(&s.out);
    assert_eq!(ix.segments.len(), 1);
    let node = |id: &str| find_symbol(&ix, id).1;

    // CALLS, resolved across files through `mod util;`.
    let normalize = node(&sym("rust", "src/util.rs", "normalize_word", "()."));
    for caller in ["Dictionary#insert", "closest_match"] {
        let src = node(&sym("rust", "src/lib.rs", caller, "()."));
        let f = edge(&ix, 0, src, normalize, EdgeKind::Calls)
            .unwrap_or_else(|| panic!("no CALLS edge {caller} -> normalize_word"));
        assert_ne!(
            f & EDGE_RESOLVED,
            0,
            "{caller} -> normalize_word not resolved"
        );
    }
    // Same file: closest_match -> levenshtein_distance; suggest -> closest_match.
    let lev = node(&sym("rust", "src/lib.rs", "levenshtein_distance", "()."));
    let closest = node(&sym("rust", "src/lib.rs", "closest_match", "()."));
    let suggest = node(&sym("rust", "src/lib.rs", "Dictionary#suggest", "()."));
    assert!(edge(&ix, 0, closest, lev, EdgeKind::Calls).is_some_and(|f| f & EDGE_RESOLVED != 0));
    assert!(edge(&ix, 0, suggest, closest, EdgeKind::Calls).is_some_and(|f| f & EDGE_RESOLVED != 0));

    // Python: main -> Circle through `from pkg.geometry import Circle`.
    let circle = node(&sym("python", "pkg/geometry.py", "Circle", "#"));
    let describe = node(&sym("python", "pkg/main.py", "describe_circle", "()."));
    let f = edge(&ix, 0, describe, circle, EdgeKind::Calls)
        .expect("no CALLS edge describe_circle -> Circle");
    assert_ne!(
        f & EDGE_RESOLVED,
        0,
        "describe_circle -> Circle not resolved"
    );

    // TSX -> TS across files through `import ... from "./api"`.
    let load = node(&sym("tsx", "web/app.tsx", "loadTodos", "()."));
    let fetch = node(&sym("typescript", "web/api.ts", "fetchPendingTodos", "()."));
    assert!(edge(&ix, 0, load, fetch, EdgeKind::Calls).is_some_and(|f| f & EDGE_RESOLVED != 0));

    // C: hash_string -> fnv1a_hash in the same file.
    let hs = node(&sym("c", "native/hash.c", "hash_string", "()."));
    let fnv = node(&sym("c", "native/hash.c", "fnv1a_hash", "()."));
    assert!(edge(&ix, 0, hs, fnv, EdgeKind::Calls).is_some());

    // CONTAINS: type -> method, file -> top-level symbol.
    let area = node(&sym("python", "pkg/geometry.py", "Circle#area", "()."));
    assert!(edge(&ix, 0, circle, area, EdgeKind::Contains).is_some());
    let imp = node(&rust_impl_id());
    let insert = node(&sym("rust", "src/lib.rs", "Dictionary#insert", "()."));
    assert!(edge(&ix, 0, imp, insert, EdgeKind::Contains).is_some());
    let inv = node(&sym("java", "java/Inventory.java", "Inventory", "#"));
    let add = node(&sym(
        "java",
        "java/Inventory.java",
        "Inventory#addItem",
        "().",
    ));
    assert!(edge(&ix, 0, inv, add, EdgeKind::Contains).is_some());
    let geo_file = file_node(&ix, 0, "pkg/geometry.py");
    assert!(edge(&ix, 0, geo_file, circle, EdgeKind::Contains).is_some());
    assert!(
        edge(&ix, 0, geo_file, area, EdgeKind::Contains).is_none(),
        "a method hangs off the file instead of its class"
    );

    // IMPORTS: file -> file.
    for (from, to) in [
        ("web/app.tsx", "web/api.ts"),
        ("web/app.tsx", "web/util.js"),
        ("native/hash.c", "native/hash.h"),
        ("src/lib.rs", "src/util.rs"),
        ("pkg/main.py", "pkg/geometry.py"),
    ] {
        let (a, b) = (file_node(&ix, 0, from), file_node(&ix, 0, to));
        assert!(
            edge(&ix, 0, a, b, EdgeKind::Imports).is_some(),
            "no IMPORTS edge {from} -> {to}"
        );
    }
    let insp = indexer::inspect::inspect(&s.out).unwrap();
    assert!(insp.resolved_calls >= 5, "{insp:?}");
    for k in ["calls", "contains", "imports"] {
        assert!(
            insp.edges_by_type.get(k).copied().unwrap_or(0) > 0,
            "{insp:?}"
        );
        assert_eq!(
            s.report.edges.get(k).copied().unwrap_or(0) as u64,
            insp.edges_by_type[k],
            "report and index disagree on {k} edges"
        );
    }
}

#[test]
fn reopened_index_answers_bm25_vector_and_hybrid_queries() {
    let s = shared();
    let ix = open(&s.out);
    let ls = &ix.segments[0];
    let seg = &ls.segment;
    let lev_id = sym("rust", "src/lib.rs", "levenshtein_distance", "().");
    let (_, lev) = find_symbol(&ix, &lev_id);
    let area_id = sym("python", "pkg/geometry.py", "Circle#area", "().");
    let (_, area) = find_symbol(&ix, &area_id);

    // BM25 with the identifier: the definition comes first.
    // (The definition's header chunk, whose parent is the definition, counts as it.)
    let hits = seg.search_bm25("levenshtein_distance", 5, None, Some(&ls.tombstones));
    let symbol_of = |c: u32| {
        let ch = &seg.table().chunks[c as usize];
        if ch.kind.as_str() == "header" {
            ch.parent.to_native()
        } else {
            c
        }
    };
    let first = hits.first().map(|h| symbol_of(h.0));
    assert_eq!(first, Some(lev), "bm25 hits: {hits:?}");
    let hits = seg.search_bm25("fnv1a_hash", 5, None, Some(&ls.tombstones));
    assert!(!hits.is_empty());

    // Vectors with the real model: a natural-language description finds the function.
    let q = embed_one("edit distance between two strings");
    assert_eq!(q.len(), encoder().dim());
    let hits = seg
        .search_vectors(
            &q,
            3,
            format::vectors::DEFAULT_NPROBE,
            None,
            Some(&ls.tombstones),
        )
        .unwrap();
    assert!(
        hits.iter().any(|h| symbol_of(h.0) == lev),
        "levenshtein_distance not in the vector top 3: {}",
        describe_hits(&ix, &hits)
    );
    let q_area = embed_one("compute the area of a circle");
    let hits = seg
        .search_vectors(
            &q_area,
            3,
            format::vectors::DEFAULT_NPROBE,
            None,
            Some(&ls.tombstones),
        )
        .unwrap();
    assert!(
        hits.iter().any(|h| symbol_of(h.0) == area),
        "Circle.area not in the vector top 3: {}",
        describe_hits(&ix, &hits)
    );
    // The stored vector of a chunk is the model's embedding of its embed text.
    let c = &seg.table().chunks[lev as usize];
    let et = indexer::build::embed_text(
        "src/lib.rs",
        &c.kind,
        &c.qualified,
        seg.chunk_text(lev).unwrap(),
    );
    let fresh = embed_one(&et);
    let stored = seg.vector(lev).unwrap();
    let cos: f32 = fresh.iter().zip(stored).map(|(a, b)| a * b).sum();
    assert!(
        cos > 0.999,
        "stored vector differs from a fresh embedding: cos {cos}"
    );

    // Hybrid through queryd.
    let o = SearchOptions::default();
    let (hits, _) = code::search(&ix, "edit distance between two strings", Some(&q), &o).unwrap();
    let top3: Vec<&str> = hits.iter().take(3).map(|h| h.symbol_id.as_str()).collect();
    assert!(top3.contains(&lev_id.as_str()), "hybrid top 3: {top3:?}");
    let lh = hits.iter().find(|h| h.symbol_id == lev_id).unwrap();
    assert_eq!(lh.path, "src/lib.rs");
    assert_eq!(lh.repo, REPO);
    assert_eq!(lh.language, "rust");
    assert_eq!(lh.kind, "function");
    assert!(lh.vector_rank.is_some());

    let qv = embed_one("fetchPendingTodos");
    let (hits, _) = code::search(&ix, "fetchPendingTodos", Some(&qv), &o).unwrap();
    assert_eq!(
        hits.first().map(|h| h.symbol_id.as_str()),
        Some(sym("typescript", "web/api.ts", "fetchPendingTodos", "().").as_str()),
        "hybrid hits: {:?}",
        hits.iter().map(|h| &h.symbol_id).collect::<Vec<_>>()
    );

    // Filters: language and kind narrow the results.
    let o = SearchOptions {
        language: Some("python".into()),
        kind: Some("method".into()),
        ..SearchOptions::default()
    };
    let (hits, _) = code::search(&ix, "area of a circle", Some(&q_area), &o).unwrap();
    assert!(!hits.is_empty());
    assert!(hits
        .iter()
        .all(|h| h.language == "python" && h.kind == "method"));
    assert_eq!(hits[0].symbol_id, area_id);

    // Lexical mode needs no vector.
    let o = SearchOptions {
        mode: Mode::Lexical,
        ..SearchOptions::default()
    };
    let (hits, _) = code::search(&ix, "ServeHTTP", None, &o).unwrap();
    assert_eq!(
        hits.first().map(|h| h.symbol_id.as_str()),
        Some(sym("go", "server/server.go", "Server#ServeHTTP", "().").as_str())
    );
}

fn describe_hits(ix: &Index, hits: &[(u32, f32)]) -> String {
    let t = ix.segments[0].segment.table();
    hits.iter()
        .map(|(c, s)| format!("{} ({s:.3})", t.chunks[*c as usize].symbol_id))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Two builds of the same input, the second one's texts and vectors written around the page
/// cache (`indexer build --direct-io`), give the same segment, byte for byte.
#[test]
fn same_input_gives_the_same_segment_id() {
    let s = shared();
    let out2 = s.tmp.path().join("index-again");
    let mut o = opts(&s.repo, &out2);
    o.bulk_cache = format::fsio::PageCache::Bypass;
    let r2 = build(&o, encoder(), &Progress::silent()).unwrap();
    assert_eq!(r2.segment_id, s.report.segment_id);
    assert!(r2.segment_id.is_some());
    let a = open(&s.out);
    let b = open(&out2);
    for name in [
        "chunks.rkyv",
        "texts.bin",
        "postings.rkyv",
        "graph.rkyv",
        "vectors.f32",
        "segment.json",
    ] {
        let x = std::fs::read(a.segments[0].segment.dir().join(name)).unwrap();
        let y = std::fs::read(b.segments[0].segment.dir().join(name)).unwrap();
        assert!(
            x == y,
            "{name} differs between two builds of the same input"
        );
    }
}

#[test]
fn incremental_rebuilds_touch_only_what_changed() {
    let s = shared();
    let tmp = tempfile::tempdir().unwrap();
    // A second copy of the same repository (same name, same content) next to a copy of the
    // shared index: every file is unchanged.
    let (repo, _) = make_repo(&tmp.path().join("src"));
    let out = tmp.path().join("index");
    copy_dir(&s.out, &out);
    let before = open(&out);
    let live_before = before.live_chunks();
    let lib_chunks: Vec<(usize, u32)> = chunks_of_file(&before, "src/lib.rs");
    let old_hashes: HashSet<[u8; 32]> = lib_chunks
        .iter()
        .map(|&(si, ci)| before.segments[si].segment.table().chunks[ci as usize].content_hash)
        .collect();
    drop(before);

    // Nothing changed: nothing is written.
    let r = run_build(&repo, &out);
    assert_eq!(r.segment_id, None, "{r:?}");
    assert_eq!(
        (r.files_changed, r.files_deleted, r.chunks_embedded),
        (0, 0, 0)
    );
    assert_eq!(r.generation, 1);
    assert_eq!(r.live_chunks, live_before);

    // Change the body of one function.
    let lib_path = repo.join("src/lib.rs");
    let lib = std::fs::read_to_string(&lib_path).unwrap();
    assert_eq!(lib.matches("cost").count(), 2);
    let edited = lib.replace("cost", "penalty");
    std::fs::write(&lib_path, &edited).unwrap();
    let r = run_build(&repo, &out);
    assert_eq!(r.files_changed, 1, "{r:?}");
    assert_eq!(r.files_deleted, 0);
    assert_eq!(r.chunks_written, lib_chunks.len());
    assert_eq!(r.chunks_tombstoned, lib_chunks.len() as u64);
    let ix = open(&out);
    assert_eq!(ix.segments.len(), 2);
    let new_seg = ix
        .segments
        .iter()
        .position(|ls| Some(ls.segment.id()) == r.segment_id.as_deref())
        .expect("the new segment is live");
    let new_chunks = &ix.segments[new_seg].segment.table().chunks;
    let changed = new_chunks
        .iter()
        .filter(|c| !old_hashes.contains(&c.content_hash))
        .count();
    assert_eq!(changed, 1, "only levenshtein_distance's text changed");
    assert_eq!(r.chunks_embedded, changed, "{r:?}");
    assert_eq!(r.chunks_reused, lib_chunks.len() - changed);
    assert!(r.chunks_reused > 0);
    assert_eq!(r.live_chunks, live_before);
    assert_eq!(ix.live_chunks(), live_before);
    assert_eq!(
        indexer::inspect::inspect(&out).unwrap().live_chunks,
        live_before
    );
    assert!(indexer::inspect::verify(&out).is_empty());
    // Reused vectors are the old ones, bit for bit.
    let old = open(&s.out);
    for (ci, c) in new_chunks.iter().enumerate() {
        if let Some((osi, oci)) =
            chunks_of_file(&old, "src/lib.rs")
                .into_iter()
                .find(|&(si, ci)| {
                    old.segments[si].segment.table().chunks[ci as usize].content_hash
                        == c.content_hash
                })
        {
            assert_eq!(
                ix.segments[new_seg].segment.vector(ci as u32),
                old.segments[osi].segment.vector(oci)
            );
        }
    }
    // Searches see the new text, never the old one.
    let lex = SearchOptions {
        mode: Mode::Lexical,
        ..SearchOptions::default()
    };
    let (hits, _) = code::search(&ix, "penalty", None, &lex).unwrap();
    assert_eq!(
        hits.first().map(|h| h.symbol_id.as_str()),
        Some(sym("rust", "src/lib.rs", "levenshtein_distance", "().").as_str())
    );
    assert!(hits[0].text.contains("penalty"));
    let (hits, _) = code::search(&ix, "cost", None, &lex).unwrap();
    assert!(
        hits.iter().all(|h| !h.text.contains("cost")),
        "old text still found: {hits:?}"
    );
    let q = embed_one("edit distance between two strings");
    let (hits, _) = code::search(
        &ix,
        "edit distance between two strings",
        Some(&q),
        &SearchOptions::default(),
    )
    .unwrap();
    let lev_hits: Vec<_> = hits
        .iter()
        .filter(|h| h.name == "levenshtein_distance")
        .collect();
    assert_eq!(lev_hits.len(), 1, "{hits:?}");
    assert!(lev_hits[0].text.contains("penalty"));
    drop(ix);

    // A third build without changes writes nothing.
    let r = run_build(&repo, &out);
    assert_eq!(r.segment_id, None, "{r:?}");
    assert_eq!(
        (r.files_changed, r.chunks_embedded, r.chunks_written),
        (0, 0, 0)
    );
    assert_eq!(r.live_chunks, live_before);

    // Deleting a file tombstones its chunks. The files that imported it and called into it
    // (web/app.tsx) are written again with those edges gone ("relinked"), vectors reused.
    let util_chunks = chunks_of_file(&open(&out), "web/util.js").len();
    assert!(util_chunks > 0);
    std::fs::remove_file(repo.join("web/util.js")).unwrap();
    let r = run_build(&repo, &out);
    assert_eq!(r.files_deleted, 1, "{r:?}");
    assert_eq!(r.files_changed, 0);
    assert_eq!(r.chunks_embedded, 0);
    let ix = open(&out);
    let relinked = ix
        .segments
        .iter()
        .find(|ls| Some(ls.segment.id()) == r.segment_id.as_deref())
        .expect("the relinked files' segment is live")
        .segment
        .table();
    let relinked_paths: Vec<&str> = relinked.files.iter().map(|f| f.path.as_str()).collect();
    assert!(
        relinked_paths.contains(&"web/app.tsx"),
        "{relinked_paths:?}"
    );
    assert_eq!(r.files_relinked, relinked_paths.len(), "{r:?}");
    assert_eq!(r.chunks_written, relinked.chunks.len());
    assert_eq!(r.chunks_reused, relinked.chunks.len());
    assert_eq!(
        r.chunks_tombstoned,
        (util_chunks + relinked.chunks.len()) as u64
    );
    assert_eq!(r.live_chunks, live_before - util_chunks as u64);
    assert_eq!(ix.live_chunks(), r.live_chunks);
    assert!(chunks_of_file(&ix, "web/util.js").is_empty());
    let (hits, _) = code::search(&ix, "debounce", None, &lex).unwrap();
    assert!(hits.iter().all(|h| h.path != "web/util.js"), "{hits:?}");
    assert!(indexer::inspect::verify(&out).is_empty());
}

#[test]
fn empty_repository_builds_an_empty_index() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("empty");
    std::fs::create_dir_all(&repo).unwrap();
    let out = tmp.path().join("index");
    let r = run_build(&repo, &out);
    assert_eq!((r.files_seen, r.files_indexed, r.chunks_written), (0, 0, 0));
    assert_eq!(r.live_chunks, 0);
    let ix = open(&out);
    assert_eq!(ix.live_chunks(), 0);
    let q = embed_one("edit distance between two strings");
    let (hits, _) = code::search(
        &ix,
        "edit distance between two strings",
        Some(&q),
        &SearchOptions::default(),
    )
    .unwrap();
    assert!(hits.is_empty(), "{hits:?}");
    assert!(indexer::inspect::verify(&out).is_empty());
    let insp = indexer::inspect::inspect(&out).unwrap();
    assert_eq!(insp.live_chunks, 0);
    assert!(insp.chunks_by_language.is_empty());
    // Building it again changes nothing.
    let r = run_build(&repo, &out);
    assert_eq!(r.segment_id, None);
}

#[test]
fn missing_root_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let err = build(
        &opts(&tmp.path().join("nope"), &tmp.path().join("index")),
        encoder(),
        &Progress::silent(),
    )
    .unwrap_err();
    assert!(matches!(err, IndexerError::MissingRoot(_)), "{err:?}");
    assert!(err.to_string().contains("nope"), "{err}");
}

/// Copies the shared index, flips one byte of `file` at `offset` (from the end when negative)
/// and returns the copy.
fn corrupted_copy(tmp: &Path, label: &str, file: &str, offset: i64) -> PathBuf {
    let out = tmp.join(label);
    copy_dir(&shared().out, &out);
    assert!(indexer::inspect::verify(&out).is_empty());
    let p = segment_file(&out, file);
    let len = std::fs::metadata(&p).unwrap().len() as i64;
    flip_byte(&p, if offset < 0 { len + offset } else { offset } as usize);
    out
}

fn assert_build_refuses(out: &Path, file: &str, what: &str) {
    let problems = indexer::inspect::verify(out);
    assert!(
        problems.iter().any(|m| m.contains(file)),
        "verify after {what}: {problems:?}"
    );
    let err = match build(&opts(&shared().repo, out), encoder(), &Progress::silent()) {
        Ok(r) => panic!("build over an index with {what} succeeded: {r:?}"),
        Err(e) => e,
    };
    assert!(matches!(err, IndexerError::ExistingIndex { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains(file), "{msg}");
    assert!(msg.contains("indexer verify"), "{msg}");
}

#[test]
fn corrupt_chunks_header_is_refused_by_the_next_build() {
    let tmp = tempfile::tempdir().unwrap();
    let out = corrupted_copy(tmp.path(), "header", "chunks.rkyv", 3);
    assert_build_refuses(&out, "chunks.rkyv", "a flipped magic byte in chunks.rkyv");
}

/// A flipped byte in the middle of chunks.rkyv (inside the records): `verify` sees it, and
/// the next build must not carry on as if the index were sound (it would keep the corrupt
/// records and reuse their vectors).
#[test]
fn corrupt_chunks_payload_is_refused_by_the_next_build() {
    let tmp = tempfile::tempdir().unwrap();
    let len = std::fs::metadata(segment_file(&shared().out, "chunks.rkyv"))
        .unwrap()
        .len() as i64;
    let out = corrupted_copy(tmp.path(), "payload", "chunks.rkyv", len / 2);
    assert_build_refuses(&out, "chunks.rkyv", "a flipped payload byte in chunks.rkyv");
}

/// The same for a byte inside a chunk's text (`texts.bin`, which opening does not read).
#[test]
fn corrupt_texts_payload_is_refused_by_the_next_build() {
    let tmp = tempfile::tempdir().unwrap();
    let len = std::fs::metadata(segment_file(&shared().out, "texts.bin"))
        .unwrap()
        .len() as i64;
    let out = corrupted_copy(tmp.path(), "texts", "texts.bin", len - 200);
    assert_build_refuses(&out, "texts.bin", "a flipped text byte in texts.bin");
}

#[test]
fn verify_names_a_corrupt_vectors_file() {
    let tmp = tempfile::tempdir().unwrap();
    // The last float of the last vector: the segment still opens, the checksum does not match.
    let out = corrupted_copy(tmp.path(), "vectors", "vectors.f32", -2);
    assert!(Index::open(&out).is_ok());
    let problems = indexer::inspect::verify(&out);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("vectors.f32"), "{problems:?}");
}

#[test]
fn model_errors_are_actionable() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("empty-model");
    std::fs::create_dir_all(&empty).unwrap();
    let err = kernels::Encoder::load(&empty, kernels::DeviceChoice::Cpu)
        .err()
        .expect("loading an empty model directory succeeded");
    assert!(err.to_string().contains("fetch-model.sh"), "{err}");
    let err = kernels::Encoder::load(&tmp.path().join("absent"), kernels::DeviceChoice::Cpu)
        .err()
        .expect("loading a missing model directory succeeded");
    assert!(err.to_string().contains("fetch-model.sh"), "{err}");

    // The real model's tokenizer and weights next to a truncated config.json.
    let broken = tmp.path().join("broken-model");
    std::fs::create_dir_all(&broken).unwrap();
    let real = cix_tests::model_dir();
    for f in ["tokenizer.json", "model.safetensors"] {
        std::fs::hard_link(real.join(f), broken.join(f))
            .or_else(|_| std::fs::copy(real.join(f), broken.join(f)).map(|_| ()))
            .unwrap_or_else(|e| panic!("{f} from {}: {e}", real.display()));
    }
    let config = std::fs::read_to_string(real.join("config.json")).unwrap();
    std::fs::write(broken.join("config.json"), &config[..config.len() / 2]).unwrap();
    let err = kernels::Encoder::load(&broken, kernels::DeviceChoice::Cpu)
        .err()
        .expect("loading a model with a corrupt config.json succeeded");
    let msg = err.to_string();
    assert!(msg.contains("config.json"), "{msg}");
    assert!(msg.contains("malformed"), "{msg}");
}

#[test]
fn report_fields_are_consistent_with_inspect() {
    let s = shared();
    let insp = indexer::inspect::inspect(&s.out).unwrap();
    let by_lang: BTreeMap<String, u64> = insp.chunks_by_language.clone();
    assert_eq!(by_lang.values().sum::<u64>(), insp.live_chunks);
    assert_eq!(insp.chunks_by_kind.values().sum::<u64>(), insp.live_chunks);
    assert!(insp.chunks_by_kind.get("method").copied().unwrap_or(0) >= 8);
    assert!(insp.chunks_by_kind.get("window").copied().unwrap_or(0) >= 2);
}

/// Files without chunks (an empty `__init__.py`) cannot be tombstoned: a build neither writes
/// such a file again while its bytes stay the same nor counts it deleted once it is gone, so
/// builds after either are up to date (before, every build after the deletion counted it
/// deleted again and committed a new generation). Deleted with the rest of its segment, it
/// goes with the segment.
#[test]
fn files_without_chunks_settle() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(repo.join("pkg")).unwrap();
    std::fs::write(repo.join("pkg/__init__.py"), "").unwrap();
    std::fs::write(repo.join("pkg/mod.py"), "def f():\n    return 1\n").unwrap();
    let out = tmp.path().join("index");
    let opts = BuildOptions::new(vec![repo.clone()], out.clone());
    let run = || build(&opts, cix_tests::cached_encoder(), &Progress::silent()).unwrap();
    let generation = || format::IndexManifest::read(&out).unwrap().generation;
    let r = run();
    assert_eq!((r.files_seen, r.files_changed), (2, 2), "{r:?}");
    let g = generation();
    let r = run();
    assert_eq!((r.files_changed, r.files_deleted), (0, 0), "{r:?}");
    assert_eq!(generation(), g, "a build with nothing changed committed");
    // Deleted, the empty file goes with the next build (its record is deleted by the
    // tombstone file's bitmap of files), and then nothing is left to delete.
    std::fs::remove_file(repo.join("pkg/__init__.py")).unwrap();
    let r = run();
    assert_eq!((r.files_changed, r.files_deleted), (0, 1), "{r:?}");
    assert_eq!(generation(), g + 1, "{r:?}");
    let g = generation();
    for _ in 0..2 {
        let r = run();
        assert_eq!((r.files_changed, r.files_deleted), (0, 0), "{r:?}");
        assert_eq!(generation(), g, "{r:?}");
    }
    let v = code::view::CodeView::open(&out).unwrap();
    assert!(!v.holds_file("repo", "pkg/__init__.py"));
    assert!(v.holds_file("repo", "pkg/mod.py"));
    drop(v);
    // Emptied, then given text again: each is one change, and then nothing.
    std::fs::write(repo.join("pkg/mod.py"), "").unwrap();
    let r = run();
    assert_eq!((r.files_changed, r.chunks_tombstoned), (1, 1), "{r:?}");
    let g = generation();
    assert_eq!(run().files_changed, 0);
    assert_eq!(generation(), g);
    // Given text again: the segment that held only the empty version goes with it.
    let segments = || format::IndexManifest::read(&out).unwrap().segments.len();
    let before = segments();
    std::fs::write(repo.join("pkg/mod.py"), "def g():\n    return 2\n").unwrap();
    let r = run();
    assert_eq!((r.files_changed, r.files_deleted), (1, 0), "{r:?}");
    assert_eq!(
        segments(),
        before,
        "the empty version's segment stayed beside the new one"
    );
    let g = generation();
    assert_eq!(run().files_changed, 0);
    assert_eq!(generation(), g);
    let v = code::view::CodeView::open(&out).unwrap();
    assert_eq!(v.resolve("g").len(), 1);
    assert!(v.resolve("f").is_empty());
    drop(v);
    // A package added by one build (a segment of its own) and then deleted whole: its empty
    // file goes with the segment, once.
    std::fs::create_dir_all(repo.join("lib")).unwrap();
    std::fs::write(repo.join("lib/__init__.py"), "").unwrap();
    std::fs::write(repo.join("lib/core.py"), "def h():\n    return 3\n").unwrap();
    assert_eq!(run().files_changed, 2);
    let before = segments();
    std::fs::remove_dir_all(repo.join("lib")).unwrap();
    let r = run();
    assert_eq!((r.files_changed, r.files_deleted), (0, 2), "{r:?}");
    assert_eq!(segments(), before - 1);
    let g = generation();
    let r = run();
    assert_eq!((r.files_changed, r.files_deleted), (0, 0), "{r:?}");
    assert_eq!(generation(), g);
    let v = code::view::CodeView::open(&out).unwrap();
    assert!(v.resolve("h").is_empty());
    assert!(!v.holds_file("repo", "lib/__init__.py"));
    drop(v);
    // An empty version that shares its segment with a live file is deleted once the file
    // gets text: before, it stayed, and came back as the file's node once the file was
    // deleted.
    std::fs::write(repo.join("pkg/c.py"), "").unwrap();
    std::fs::write(repo.join("pkg/d.py"), "def d():\n    return 4\n").unwrap();
    assert_eq!(run().files_changed, 2);
    std::fs::write(repo.join("pkg/c.py"), "def c():\n    return 5\n").unwrap();
    let r = run();
    assert_eq!((r.files_changed, r.files_deleted), (1, 0), "{r:?}");
    std::fs::remove_file(repo.join("pkg/c.py")).unwrap();
    let r = run();
    assert_eq!((r.files_changed, r.files_deleted), (0, 1), "{r:?}");
    let g = generation();
    let r = run();
    assert_eq!((r.files_changed, r.files_deleted), (0, 0), "{r:?}");
    assert_eq!(generation(), g);
    let v = code::view::CodeView::open(&out).unwrap();
    assert!(
        !v.holds_file("repo", "pkg/c.py"),
        "an older empty version came back"
    );
    assert!(v.holds_file("repo", "pkg/d.py"));
    drop(v);
    // A merge drops the deleted record: every segment into one, the same live files.
    let m = indexer::merge::merge(
        &out,
        &indexer::merge::MergePolicy {
            budget: 1 << 30,
            max_segments: Some(1),
            deletes: false,
        },
        &Progress::silent(),
    )
    .unwrap();
    assert!(!m.merges.is_empty(), "{m:?}");
    let v = code::view::CodeView::open(&out).unwrap();
    assert_eq!(v.index.segments.len(), 1);
    assert!(!v.holds_file("repo", "pkg/c.py"));
    assert!(!v.holds_file("repo", "pkg/__init__.py"));
    assert!(v.holds_file("repo", "pkg/d.py") && v.holds_file("repo", "pkg/mod.py"));
}

/// The facts cache (`facts.cache`, `indexer::build` `facts.rs`): an incremental build that
/// reads unchanged files' facts from it writes what a build that parses every file writes
/// (same segments, edges and relinks), and a damaged cache costs parses, never a wrong answer.
#[test]
fn facts_cache_gives_what_parsing_gives() {
    let s = shared();
    let tmp = tempfile::tempdir().unwrap();
    let (repo, _) = make_repo(&tmp.path().join("src"));
    let (cached, parsed) = (tmp.path().join("cached"), tmp.path().join("parsed"));
    copy_dir(&s.out, &cached);
    copy_dir(&s.out, &parsed);
    let cache = cached.join("facts.cache");
    assert!(cache.is_file(), "the first build wrote no facts cache");
    let run = |out: &Path, reuse: bool| {
        let mut o = opts(&repo, out);
        o.reuse_facts = reuse;
        build(&o, cix_tests::cached_encoder(), &Progress::silent()).unwrap()
    };
    // One body edited, a file deleted (its importers are relinked), a file added.
    let lib = repo.join("src/lib.rs");
    let text = std::fs::read_to_string(&lib)
        .unwrap()
        .replace("cost", "penalty");
    std::fs::write(&lib, text).unwrap();
    std::fs::remove_file(repo.join("web/util.js")).unwrap();
    write(
        &repo.join("pkg/added.py"),
        b"def added_here():\n    return 5\n",
    );
    let a = run(&cached, true);
    let b = run(&parsed, false);
    assert_eq!(b.files_cached, 0, "{b:?}");
    // Every file but the edited and the added one is read from the cache.
    assert_eq!(a.files_cached, a.files_indexed - 2, "{a:?}");
    assert!(a.files_relinked > 0, "{a:?}");
    let key = |r: &BuildReport| {
        (
            r.segment_ids.clone(),
            r.files_changed,
            r.files_deleted,
            r.files_relinked,
            r.chunks_written,
            r.chunks_tombstoned,
            r.edges.clone(),
            r.live_chunks,
            r.parse_error_files,
        )
    };
    assert_eq!(key(&a), key(&b));
    assert!(a.facts_written.is_some());
    let manifest = |d: &Path| std::fs::read(d.join("MANIFEST")).unwrap();
    assert_eq!(manifest(&cached), manifest(&parsed));

    // A build limited by `only` parses every file and caches what it parsed, also the changed
    // file it does not write; the next build writes that one from its bytes (a changed file
    // whose facts come from the cache), outside the budget's counters. Both under the
    // smallest budget (texts shed, segments cut).
    let small = |out: &Path, reuse: bool, only: bool| {
        let mut o = opts(&repo, out);
        o.reuse_facts = reuse;
        o.memory_budget = indexer::build::MIN_MEMORY_BUDGET;
        o.only = only.then(|| vec![(REPO.to_string(), "src".to_string())]);
        build(&o, cix_tests::cached_encoder(), &Progress::silent()).unwrap()
    };
    let text = std::fs::read_to_string(&lib).unwrap() + "\npub fn only_scope() -> u8 {\n    1\n}\n";
    std::fs::write(&lib, text).unwrap();
    write(
        &repo.join("pkg/added.py"),
        b"def added_here():\n    return only_outside()\n\ndef only_outside():\n    return 6\n",
    );
    let (a, b) = (small(&cached, true, true), small(&parsed, false, true));
    assert_eq!(a.files_changed, 1, "{a:?}");
    assert_eq!(key(&a), key(&b));
    let (a, b) = (small(&cached, true, false), small(&parsed, false, false));
    assert_eq!(
        (a.files_changed, a.files_cached),
        (1, a.files_indexed),
        "{a:?}"
    );
    assert_eq!((a.files_reread, a.files_rechunked), (0, 0), "{a:?}");
    assert_eq!(key(&a), key(&b));
    assert_eq!(manifest(&cached), manifest(&parsed));

    // Nothing changed, every file a hit: the cache is left as it is.
    let before = std::fs::read(&cache).unwrap();
    let r = run(&cached, true);
    assert_eq!(
        (r.files_cached, r.segment_id.clone()),
        (r.files_indexed, None)
    );
    assert_eq!(r.facts_written, None);
    assert_eq!(std::fs::read(&cache).unwrap(), before);

    // A flipped byte inside one entry: that file is parsed, the others are not, the build
    // says nothing (the entry's check is the cache's own business) and writes a whole cache.
    let b = std::fs::read(&cache).unwrap();
    let header = 14 + usize::from(u16::from_le_bytes([b[12], b[13]]));
    flip_byte(&cache, header + 5);
    let r = run(&cached, true);
    assert_eq!(r.files_cached, r.files_indexed - 1, "{r:?}");
    assert_eq!((r.segment_id.clone(), r.notes.len()), (None, 0), "{r:?}");
    assert_eq!(run(&cached, true).files_cached, r.files_indexed);

    // A cut-short cache is reported and replaced; a foreign or unreadable one never used.
    let len = std::fs::metadata(&cache).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&cache)
        .unwrap()
        .set_len(len - 7)
        .unwrap();
    let r = run(&cached, true);
    assert_eq!(r.files_cached, 0, "{r:?}");
    assert!(
        r.notes.iter().any(|n| n.contains("facts cache")),
        "{:?}",
        r.notes
    );
    assert_eq!(r.segment_id, None);
    assert_eq!(run(&cached, true).files_cached, r.files_indexed);
    // Written under another extraction key (another version of the indexer): not read, and
    // not worth a note.
    let mut bytes = std::fs::read(&cache).unwrap();
    bytes[15] ^= 1;
    std::fs::write(&cache, &bytes).unwrap();
    let r = run(&cached, true);
    assert_eq!((r.files_cached, r.notes.len()), (0, 0), "{r:?}");
    std::fs::write(&cache, b"not a cache at all").unwrap();
    let r = run(&cached, true);
    assert_eq!(r.files_cached, 0, "{r:?}");
    assert_eq!(r.notes.len(), 1, "{:?}", r.notes);
    assert_eq!(manifest(&cached), manifest(&parsed));
    assert!(indexer::inspect::verify(&cached).is_empty());
}

/// A file whose name is not UTF-8 is left out (stored paths are UTF-8) and named in the
/// warnings, as a file whose bytes are not UTF-8 is: before, it was only counted.
#[cfg(unix)]
#[test]
fn a_name_that_is_not_utf8_is_named_in_the_warnings() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(
        repo.join(std::ffi::OsStr::from_bytes(b"caf\xe9.py")),
        "x = 1\n",
    )
    .unwrap();
    std::fs::write(repo.join("ok.py"), "def ok():\n    return 1\n").unwrap();
    let opts = BuildOptions::new(vec![repo.clone()], tmp.path().join("index"));
    let r = build(&opts, cix_tests::cached_encoder(), &Progress::silent()).unwrap();
    assert_eq!(r.skipped.get("invalid UTF-8").copied(), Some(1), "{r:?}");
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("caf") && w.contains("name is not UTF-8")),
        "{:?}",
        r.warnings
    );
}
